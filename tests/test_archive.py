"""The embedded Ray's jobs kept after it stops (`reach.archive`): what is saved and when, how a
stop saves them first, and how `logs` and `runs` read them once that Ray is gone.

Ray's job API is played by a loopback HTTP server in this process (the two GETs the archive
makes): a real Ray costs ~10 s to start and cannot be made to hold a job ended a minute ago or
to fail a request; tests/test_archive_embedded.py runs the whole story on a real one."""
from __future__ import annotations

import contextlib
import io
import json
import os
import time
from pathlib import Path

import pytest

from orchestrator import contract
from orchestrator.reach import archive, embedded
from orchestrator.state import State
from tests import fake_ray

TOKEN = "the-token"
NOW = 1_800_000_000.0


class FakeRay(fake_ray.FakeRay):
    """Ray's job table and logs on 127.0.0.1 (tests/fake_ray.py), the token required; counts
    log requests."""

    def __init__(self) -> None:
        super().__init__(token=TOKEN)

    def job(self, job_id: str, status: str, log: str = "", *, start: float = NOW - 120,
            end: float | None = NOW - 60, message: str = "", **_fields: object) -> dict:
        return super().job(job_id, status, log, entrypoint="python -m secret-stuff",
                           start=start, end=end, message=message, metadata={"experiment": "e"},
                           runtime_env={"env_vars": {"X": "hidden"}},
                           exit_code=1 if status == "FAILED" else None)


@pytest.fixture
def ray():
    fake = FakeRay()
    try:
        yield fake
    finally:
        fake.close()


FAILED_LOG = "starting\nTraceback ...\nValueError: boom\n" + contract.result_line(
    {"status": "FAILED", "error": "ValueError: boom"}) + "\n"


def save(ray: FakeRay, *, stopping: bool, now: float = NOW) -> list[str]:
    return archive.save(ray.address, TOKEN, stopping=stopping, now=now)


def test_ended_jobs_are_kept_once_and_running_ones_when_their_ray_stops(ray):
    ray.job("done", "FAILED", FAILED_LOG, message="Job entrypoint command failed")
    ray.job("just-ended", "SUCCEEDED", "ok\n", end=NOW - 5)   # its follower may still write
    ray.job("busy", "RUNNING", "epoch 1\n", end=None)
    ray.jobs["driver"] = {"type": "DRIVER", "submission_id": None, "status": "SUCCEEDED"}

    assert save(ray, stopping=False) == ["done"]
    assert save(ray, stopping=False) == []            # once
    assert ray.log_requests == ["done"]
    folder = archive.folder()
    assert folder.stat().st_mode & 0o777 == 0o700
    for path in (archive.log_path("done"), archive.record_path("done")):
        assert path.stat().st_mode & 0o777 == 0o600
    assert archive.log_path("done").read_text() == FAILED_LOG
    record = json.loads(archive.record_path("done").read_text())
    assert record["status"] == "FAILED" and record["metadata"] == {"experiment": "e"}
    assert "entrypoint" not in record and "runtime_env" not in record
    kept = archive.read("done")
    assert kept is not None and kept.reason() == "ValueError: boom"   # the job's own error

    assert sorted(save(ray, stopping=True)) == ["busy", "just-ended"]
    busy = archive.read("busy")
    assert busy is not None and busy.status == "STOPPED" and busy.stopped_with_ray
    assert busy.reason() == "stopped with the embedded Ray while RUNNING"
    assert archive.log_path("busy").read_text() == "epoch 1\n"
    assert archive.read("just-ended").reason() is None
    assert archive.read("no-such-job") is None and archive.read("../x") is None


def test_a_followed_log_is_left_whole_and_a_later_job_of_the_same_id_kept_again(ray):
    # `orchestrate run` followed it: every line, a secret hidden
    ray.job("followed", "FAILED", "token s3cret\nboom\n", start=time.time() - 60, end=NOW - 60)
    followed = archive.log_path("followed")
    followed.parent.mkdir(mode=0o700, parents=True)
    followed.write_text("token ***\nboom\n")
    # a follow that was interrupted: fewer lines than Ray has
    ray.job("cut", "FAILED", "one\ntwo\nthree\n", start=time.time() - 60)
    archive.log_path("cut").write_text("one\n")
    assert sorted(save(ray, stopping=False)) == ["cut", "followed"]
    assert followed.read_text() == "token ***\nboom\n"
    assert archive.log_path("cut").read_text() == "one\ntwo\nthree\n"

    # the same experiment, unchanged, run again on a later Ray: the same id, another job
    ray.job("followed", "SUCCEEDED", "again\n", start=time.time() + 60, end=NOW)
    assert save(ray, stopping=True) == ["followed"]
    assert followed.read_text() == "again\n"   # the earlier job's log was not this one's
    assert archive.read("followed").status == "SUCCEEDED"


def record(state: State, job_id: str, submitted: float) -> None:
    state.store.record_job(job_id, cluster=None, experiment="/x/e.yaml", name="e")
    state.store.update_job(job_id, {"submitted_at": submitted})


def test_runs_takes_what_ray_cannot_say_from_what_was_kept(ray, capsys):
    """No embedded Ray up (none is started): the kept end is shown and recorded."""
    from orchestrator.cli import main

    state = State.here()
    ray.job("failed", "FAILED", FAILED_LOG)
    ray.job("cut-off", "RUNNING", "epoch 1\n", end=None)
    ray.job("earlier", "FAILED", "old\n", start=NOW - 3600)
    save(ray, stopping=True, now=NOW)
    record(state, "failed", NOW - 120)
    record(state, "cut-off", NOW - 120)
    record(state, "earlier", NOW)    # run again since: what was kept is an earlier job's
    record(state, "never-kept", NOW)

    assert main(["runs", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    rows = {row["job_id"]: row for row in json.loads(out)}
    assert "note: 2 run(s) on embedded not updated: the embedded Ray is not running" in err
    assert (rows["failed"]["status"], rows["failed"]["error"]) == \
        ("FAILED", "job failed failed: ValueError: boom")
    assert (rows["cut-off"]["status"], rows["cut-off"]["error"]) == \
        ("STOPPED", "job cut-off stopped: stopped with the embedded Ray while RUNNING")
    assert rows["earlier"]["status"] == rows["never-kept"]["status"] == "UNKNOWN"
    assert state.store.job("failed")["status"] == "FAILED"   # recorded: next time offline
    assert state.store.job("earlier").get("status") is None
    assert not (Path(os.environ["ORCHESTRATE_HOME"]) / "local-ray" / "record.json").exists()


def test_logs_prints_what_was_kept_once_the_embedded_ray_is_gone(ray):
    ray.job("failed", "FAILED", FAILED_LOG)
    save(ray, stopping=True)
    code, out, err = cli("logs", "failed")
    assert (code, out) == (0, FAILED_LOG)
    assert err == ("the embedded Ray no longer has job failed (FAILED); its log as kept when "
                   f"that Ray stopped: {archive.log_path('failed')}\n")
    code, out, err = cli("logs", "failed", "--follow")   # as a job that ended: FAILED, 1
    assert (code, out) == (1, FAILED_LOG) and "job failed: FAILED" in err
    code, out, err = cli("logs", "never-kept")
    assert code == 1 and out == "" and "ERROR the embedded Ray is not running" in err


def cli(*args: str) -> tuple[int, str, str]:
    from orchestrator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def recorded_ray(ray: FakeRay, monkeypatch) -> list[bool]:
    """`ray` as this home's embedded Ray (its record and token), its process taken as running;
    `stop` only notes whether the job's log was kept by then."""
    secrets = State.here().secrets
    secrets.put(embedded.TOKEN_KEY, TOKEN)
    embedded._write_record(embedded.EmbeddedRay(ray.address, "127.0.0.1:1", os.getppid(),
                                                "/tmp/orc-archive-test/ray", 4), secrets)
    stops: list[bool] = []
    monkeypatch.setattr(embedded, "running", lambda _ray: True)
    monkeypatch.setattr(embedded, "stop",
                        lambda _ray: stops.append(archive.read("job") is not None))
    return stops


@pytest.mark.parametrize("how", ["shutdown", "stop_if", "leave"])
def test_a_stop_keeps_the_logs_first_and_goes_on_when_that_fails(ray, monkeypatch, how):
    ray.job("job", "RUNNING", "epoch 1\n", end=None)
    secrets = State.here().secrets

    def stop() -> None:
        pid = embedded.recorded().pid
        if how == "shutdown":
            assert embedded.shutdown(secrets)
        elif how == "stop_if":
            assert embedded.stop_if(pid, lambda _ray: True, secrets)
        else:
            entry = embedded._user_entry()
            entry.touch()
            embedded._leave(entry, embedded.recorded(), secrets, 0)

    stops = recorded_ray(ray, monkeypatch)
    stop()
    assert stops == [True] and embedded.recorded() is None
    assert archive.read("job").stopped_with_ray

    ray.failing = True   # its log cannot be read: the stop goes on
    archive.record_path("job").unlink()
    stops = recorded_ray(ray, monkeypatch)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        stop()
    assert stops == [False] and embedded.recorded() is None
    assert "job logs were not all kept: HTTP 500" in err.getvalue()


def test_the_watchdog_keeps_what_ended_at_each_look(ray, monkeypatch):
    from orchestrator.reach import watchdog

    ray.job("ended", "FAILED", FAILED_LOG, start=time.time() - 120, end=time.time() - 60)
    ray.job("busy", "RUNNING", "epoch 1\n", end=None)
    recorded_ray(ray, monkeypatch)
    look = watchdog._Watch(embedded.recorded().pid, State.here().secrets)
    assert watchdog._look(look) is False   # kept up (no idle limit): it goes on watching
    assert archive.read("ended").status == "FAILED" and archive.read("busy") is None


def test_why_a_cloud_cluster_stopped_is_read_from_its_newest_archive(tmp_path):
    """Issue 52: a cloud head's watcher takes its own machine down with the cluster, and its
    file with it; `status` reads why from the archive it wrote first (the newest, written since
    the cluster's last `up`), on the simulated cloud from S3 (tests/cluster/test_cloud_aws.py)."""
    from orchestrator.cluster.archive import last_stop

    config = {"cluster_name": "c", "metadata": {"orchestrate": {"archive": str(tmp_path)}}}
    for name, reason, at in (("20261203T060000Z-down", "down", 1000.0),
                             ("20261203T070000Z-idle-for-2-min", "idle for 2 min", 2000.0)):
        folder = tmp_path / "c" / name
        folder.mkdir(parents=True)
        (folder / "stopped.json").write_text(json.dumps({"reason": reason, "at": at}))
    found = last_stop("c", config, since=1500.0)
    assert found == {"reason": "idle for 2 min", "at": 2000.0,
                     "archive": str(tmp_path / "c" / "20261203T070000Z-idle-for-2-min")}
    assert last_stop("c", config, since=2500.0) is None      # older than the last `up`
    assert last_stop("other", config, since=0.0) is None      # no archive of that cluster
    assert last_stop("c", {"cluster_name": "c"}, since=0.0) is None   # no `archive:`
