"""The folder StateStore and the file SecretStore: private, atomic, and clear when damaged."""
from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from orchestrator.errors import ClusterError
from orchestrator.state import LAUNCHING, ClusterRecord, State, cluster_key
from orchestrator.state.folder import is_valid_name
from orchestrator.util.files import atomic_write


def test_token_is_private_stable_and_apart_from_state(state):
    path = state.secrets.ensure(cluster_key("c1"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    token = path.read_text()
    assert len(token) == 64 and state.secrets.ensure(cluster_key("c1")).read_text() == token
    assert state.secrets.read(cluster_key("c1")) == token
    state.store.write_cluster(ClusterRecord(name="c1", provider="local", file="/x.yaml",
                                            config_hash="h"))
    cluster_folder = state.store.cluster_dir("c1")
    assert not any(token in p.read_text() for p in cluster_folder.rglob("*") if p.is_file())
    assert cluster_folder not in path.parents  # state can be copied without the token


def test_records_round_trip_and_list(state):
    for name in ("b", "a"):
        state.store.write_cluster(ClusterRecord(name=name, provider="local", file="/x.yaml",
                                                config_hash="h"))
    assert [r.name for r in state.store.list_clusters()] == ["a", "b"]
    record = state.store.read_cluster("a")
    assert record.state == LAUNCHING and record.version
    state.store.forget_cluster("a")
    assert state.store.read_cluster("a") is None


def test_invalid_names_are_refused(state):
    for name in ("../etc", "c1\n"):
        assert not is_valid_name(name)
        with pytest.raises(ClusterError):
            state.store.cluster_dir(name)
    with pytest.raises(ClusterError):
        state.secrets.path("../../etc/passwd")


def _hold_lock(name, home, ready, release):
    os.environ["ORCHESTRATE_HOME"] = home
    with State.here().store.lock(name, action="up"):
        ready.set()
        release.wait(30)


def test_lock_refuses_a_second_holder_and_names_it(state):
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock,
                         args=("busy", os.environ["ORCHESTRATE_HOME"], ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        with pytest.raises(ClusterError, match=rf"busy.*\(up, pid {holder.pid} on "), \
                state.store.lock("busy", action="down"):
            pass
    finally:
        release.set()
        holder.join(30)
    with state.store.lock("busy", action="down"):
        pass  # free again once the holder has gone


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "f.json"
    atomic_write(target, "old")

    def boom(*_):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        atomic_write(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_an_unreadable_or_empty_token_is_an_error_that_does_not_show_it(state):
    path = state.secrets.ensure(cluster_key("tok"))
    secret = path.read_text()
    path.write_text("")
    with pytest.raises(ClusterError, match="is empty"):
        state.secrets.read(cluster_key("tok"))
    path.write_bytes(b"\xff" + secret.encode())
    with pytest.raises(ClusterError) as raised:
        state.secrets.read(cluster_key("tok"))
    assert secret not in raised.value.message and "unreadable" in raised.value.message


def test_state_folders_are_private_and_a_broken_home_is_a_clear_error(tmp_path, monkeypatch,
                                                                        state):
    folder = state.store.workspace("p")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    monkeypatch.setenv("ORCHESTRATE_HOME", str(home))
    for action in (lambda s: s.store.lock("p", action="up").__enter__(),
                   lambda s: s.secrets.ensure(cluster_key("p"))):
        with pytest.raises(ClusterError, match="cannot create the s"):
            action(State.here())


def test_jobs_and_runs_are_recorded_and_damaged_entries_read_as_none(state):
    state.store.record_job("j/1", cluster="c", experiment="/e.yaml", name="run")
    assert state.store.job("j/1")["cluster"] == "c"
    state.store.record_run("run", {"status": "SUCCEEDED"}, "j/1")
    assert state.store.run("run") == {"status": "SUCCEEDED", "job_id": "j/1"}
    entry = Path(os.environ["ORCHESTRATE_HOME"]) / "runs" / "run.json"
    entry.write_text("{broken")
    assert state.store.run("run") is None and state.store.run("never") is None


def test_tokens_of_the_previous_layout_are_adopted_once(monkeypatch, tmp_path):
    """0.1.0 kept tokens at clusters/<name>/auth_token and local-ray/auth_token: a cluster
    launched before the upgrade must keep its token, or it could not be reached."""
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path))
    for folder, token in (("clusters/old", "a" * 64), ("local-ray", "b" * 64)):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "auth_token").write_text(token)
    state = State.here()
    assert state.secrets.read(cluster_key("old")) == "a" * 64
    assert state.secrets.read("local-ray") == "b" * 64
    assert stat.S_IMODE(state.secrets.path(cluster_key("old")).stat().st_mode) == 0o600
    assert not list(tmp_path.glob("*/auth_token")) and not list(tmp_path.glob("*/*/auth_token"))
    State.here()  # nothing left to move: the tokens stay as they are
    assert state.secrets.read(cluster_key("old")) == "a" * 64


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_home_and_what_it_records_are_private(monkeypatch, tmp_path):
    """Jobs, runs and services name clusters, experiments, checkpoints and URLs: 0700 folders
    and 0600 files, whatever the umask; a home left wider by an earlier version is tightened
    on first use."""
    home = tmp_path / "home"
    monkeypatch.setenv("ORCHESTRATE_HOME", str(home))
    old = os.umask(0o022)
    try:
        state = State.here()
        state.store.record_job("j1", cluster=None, experiment="/e.yaml", name="run")
        state.store.update_job("j1", {"ended": True})
        state.store.record_run("run", {"status": "SUCCEEDED"}, "j1")
        state.store.record_service("svc", {"url": "http://127.0.0.1:8000/svc"})
        state.store.write_cluster(ClusterRecord(name="c1", provider="local", file="/x.yaml",
                                                config_hash="h"))
    finally:
        os.umask(old)
    assert mode(home) == 0o700
    for kind in ("jobs", "runs", "services"):
        assert mode(home / kind) == 0o700, kind
        [entry] = (home / kind).glob("*.json")
        assert mode(entry) == 0o600, entry
    assert mode(home / "clusters" / "c1" / "record.json") == 0o600

    for folder in (home, home / "jobs", home / "runs", home / "services"):
        folder.chmod(0o755)   # as 0.2 left them
    (home / "jobs" / "j1.json").chmod(0o644)
    State.here()
    assert [mode(f) for f in (home, home / "jobs", home / "runs", home / "services")] == \
        [0o700] * 4
    assert mode(home / "jobs" / "j1.json") == 0o600


def test_a_shared_folder_is_refused_as_the_home(monkeypatch, tmp_path):
    """A home others may write to (a sticky, world-writable folder such as /tmp) is not made
    private behind their backs, nor used."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("ORCHESTRATE_HOME", str(shared))
    with pytest.raises(ClusterError, match="is writable by other users") as refused:
        State.here()
    assert "ORCHESTRATE_HOME" in (refused.value.hint or "")
    assert mode(shared) == 0o1777
