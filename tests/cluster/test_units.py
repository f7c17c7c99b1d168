"""State store, hardening and change detection: no SSH, no Ray."""
from __future__ import annotations

import json
import multiprocessing
import os
import stat
import subprocess
import sys

import pytest

from orchestrator.cluster import changes, state
from orchestrator.cluster.secure import harden_ray_config
from orchestrator.errors import ClusterError


def test_token_is_private_and_stable():
    path = state.ensure_token("c1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    token = path.read_text()
    assert len(token) == 64 and state.ensure_token("c1").read_text() == token
    assert state.read_token("c1") == token


def test_records_round_trip_and_list():
    for name in ("b", "a"):
        state.write_record(state.Record(name=name, provider="local", file="/x.yaml",
                                        config_hash="h"))
    assert [r.name for r in state.list_records()] == ["a", "b"]
    record = state.read_record("a")
    assert record.state == state.LAUNCHING and record.version
    state.remove("a")
    assert state.read_record("a") is None


def test_invalid_names_are_refused():
    with pytest.raises(ClusterError):
        state.cluster_dir("../etc")


def _hold_lock(name, home, ready, release):
    os.environ["ORCHESTRATE_HOME"] = home
    with state.locked(name, action="up"):
        ready.set()
        release.wait(30)


def test_lock_refuses_a_second_holder():
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock,
                         args=("busy", os.environ["ORCHESTRATE_HOME"], ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        with pytest.raises(ClusterError, match="busy.*pid"):
            with state.locked("busy", action="down"):
                pass
    finally:
        release.set()
        holder.join(30)
    with state.locked("busy", action="down"):
        pass  # free again once the holder has gone


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "f.json"
    state.atomic_write(target, "old")

    def boom(*_):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        state.atomic_write(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_second_up_on_a_locked_cluster_fails_clearly(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("cluster_name: locked\nprovider: {type: local, head_ip: 127.0.0.9, "
                    "worker_ips: []}\nauth: {ssh_user: u, ssh_private_key: /nonexistent}\n")
    with state.locked("locked", action="up"):
        done = subprocess.run([sys.executable, "-m", "orchestrator", "up", str(path), "-y"],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "busy" in done.stderr and "Traceback" not in done.stderr


def test_down_without_argument_needs_exactly_one_cluster():
    for name in ("one", "two"):
        state.write_record(state.Record(name=name, provider="local", file="/x", config_hash="h"))
    done = subprocess.run([sys.executable, "-m", "orchestrator", "down", "-y"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "one, two" in done.stderr


def test_down_of_a_cluster_never_handed_to_ray_just_forgets_it():
    state.write_record(state.Record(name="early", provider="aws", file="/x", config_hash="h"))
    done = subprocess.run([sys.executable, "-m", "orchestrator", "down", "early", "-y"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert state.read_record("early") is None


def test_status_json_never_shows_the_token():
    state.ensure_token("s")
    state.write_record(state.Record(name="s", provider="local", file="/x", config_hash="h",
                                    state=state.FAILED, message="ray up failed"))
    done = subprocess.run([sys.executable, "-m", "orchestrator", "status", "--format", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows[0]["state"] == "failed" and rows[0]["live"]["reachable"] is False
    assert state.read_token("s") not in done.stdout


CLOUD = {
    "cluster_name": "c", "provider": {"type": "aws", "region": "us-west-2"},
    "head_start_ray_commands": [
        "ray stop",
        "ulimit -n 65536; ray start --head --port=6379 --dashboard-host=0.0.0.0 "
        "--autoscaling-config=~/ray_bootstrap_config.yaml",
    ],
}


def test_harden_cloud_binds_dashboard_to_loopback_and_enables_tokens():
    hardened = harden_ray_config(CLOUD, provider="aws", token_file="/state/c/auth_token")
    assert CLOUD["head_start_ray_commands"][1].count("0.0.0.0") == 1  # input untouched
    start = hardened["head_start_ray_commands"][1]
    assert "--dashboard-host=127.0.0.1" in start and "0.0.0.0" not in start
    assert "--disable-usage-stats" in start
    for command in hardened["head_start_ray_commands"] + hardened["worker_start_ray_commands"]:
        assert command.startswith("export RAY_AUTH_MODE=token; ")
    worker = hardened["worker_start_ray_commands"][-1]
    assert "ray start --address=$RAY_HEAD_IP:6379" in worker and "--dashboard-host" not in worker
    assert hardened["file_mounts"] == {"~/.ray/auth_token": "/state/c/auth_token"}
    assert harden_ray_config(CLOUD, provider="aws", token_file="/state/c/auth_token") == hardened


def test_harden_local_keeps_the_users_dashboard_host_or_uses_the_head_address():
    config = {"cluster_name": "l", "provider": {"type": "local", "head_ip": "10.0.0.5",
                                                 "worker_ips": ["10.0.0.6"]}}
    hardened = harden_ray_config(config, provider="local", token_file="/t")
    assert hardened["head_start_ray_commands"][-1].endswith("--dashboard-host=10.0.0.5")
    config["head_start_ray_commands"] = ["ray start --head --dashboard-host 0.0.0.0"]
    hardened = harden_ray_config(config, provider="local", token_file="/t")
    assert "--dashboard-host 0.0.0.0" in hardened["head_start_ray_commands"][0]


def test_changes_tell_scaling_from_the_rest():
    old = {"max_workers": 2, "available_node_types": {"w": {"min_workers": 0, "node_config": {
        "InstanceType": "m5.large"}}}, "setup_commands": ["pip install x"]}
    new = json.loads(json.dumps(old))
    assert changes.config_hash(old) == changes.config_hash(new)
    new["available_node_types"]["w"]["min_workers"] = 1
    new["max_workers"] = 4
    diff = changes.diff(old, new)
    assert diff == ["~ available_node_types.w.min_workers", "~ max_workers"]
    assert changes.only_scaling(diff)
    new["setup_commands"] = ["pip install y"]
    assert not changes.only_scaling(changes.diff(old, new))
    assert not changes.only_scaling([])


@pytest.mark.parametrize("content, words", [
    ("[1, 2]", "corrupted: expected a JSON object"),
    ('{"name": "bad"}', "corrupted: missing provider, file, config_hash"),
    ('{"name": "bad", "provider": "local", "file": "/x", "config_hash": "h", '
     '"updated_at": "yesterday"}', "corrupted: 'updated_at' has the wrong type (str)"),
    ('{"name": "other", "provider": "local", "file": "/x", "config_hash": "h"}',
     "corrupted: it names cluster 'other', not 'bad'"),
    ("{not json", "unreadable"),
])
def test_a_damaged_record_is_a_clear_error_for_status_and_down(content, words):
    folder = state.cluster_dir("bad")
    folder.mkdir(parents=True)
    (folder / "record.json").write_text(content)
    for args in (["status"], ["status", "bad"], ["down", "bad", "-y"]):
        done = subprocess.run([sys.executable, "-m", "orchestrator", *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, (args, done.stderr)
        assert f"{folder / 'record.json'} is {words}" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and f"remove {folder}" in done.stderr


def test_a_damaged_rendered_config_is_reported_not_a_crash():
    state.ensure_token("dmg")
    state.write_record(state.Record(name="dmg", provider="aws", file="/x", config_hash="h",
                                    state=state.UP, head_ip="127.0.0.1",
                                    dashboard_host="127.0.0.1"))
    state.rendered_path("dmg").write_text("[]")
    status = subprocess.run([sys.executable, "-m", "orchestrator", "status", "--format", "json"],
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert "ray-cluster.yaml is corrupted" in json.loads(status.stdout)[0]["live"]["error"]
    down = subprocess.run([sys.executable, "-m", "orchestrator", "down", "dmg", "-y"],
                          capture_output=True, text=True, timeout=60)
    assert down.returncode == 1 and "Traceback" not in down.stderr
    assert "ray-cluster.yaml is corrupted: expected a JSON object" in down.stderr
    assert state.read_record("dmg").state == state.UP  # nothing was handed to `ray down`


def test_an_unreadable_or_empty_token_is_an_error_that_does_not_show_it():
    path = state.ensure_token("tok")
    secret = path.read_text()
    path.write_text("")
    with pytest.raises(ClusterError, match="is empty"):
        state.read_token("tok")
    path.write_bytes(b"\xff" + secret.encode())
    with pytest.raises(ClusterError) as raised:
        state.read_token("tok")
    assert secret not in raised.value.message and "unreadable" in raised.value.message


def test_names_with_a_trailing_newline_are_refused():
    assert not state.is_valid_name("c1\n")
    with pytest.raises(ClusterError):
        state.cluster_dir("c1\n")


def test_launcher_logs_are_private(tmp_path):
    from orchestrator.cluster import launcher

    log = tmp_path / "up.log"
    launcher.run_ray(["--version"], log_path=log, progress=lambda _: None, timeout=120,
                     secrets=["ray"])
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert "ray" not in log.read_text().split("\n", 2)[2]  # the secret is masked in the output


def test_the_dashboard_host_is_quoted_in_the_start_command():
    config = {"cluster_name": "l", "provider": {"type": "local", "head_ip": "a b;id",
                                                 "worker_ips": []}}
    start = harden_ray_config(config, provider="local", token_file="/t")["head_start_ray_commands"]
    assert start[-1].endswith("--dashboard-host='a b;id'")


def test_ssh_refuses_users_and_hosts_that_would_be_options():
    from orchestrator.cluster.ssh import ssh_command

    assert ssh_command({"ssh_user": "u"}, "10.0.0.1")[-1] == "u@10.0.0.1"
    for auth, host in (({"ssh_user": "-oProxyCommand=id"}, "h"), ({"ssh_user": "u"}, "-oX=y")):
        with pytest.raises(ClusterError, match="may start with '-'"):
            ssh_command(auth, host)


def test_state_folders_are_private_and_a_broken_home_is_a_clear_error(tmp_path, monkeypatch):
    folder = state.make_folder("p")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    monkeypatch.setenv("ORCHESTRATE_HOME", str(home))
    with pytest.raises(ClusterError, match="cannot create the state folder"):
        with state.locked("p", action="up"):
            pass
