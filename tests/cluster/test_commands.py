"""`up`, `down` and `status` through the CLI where no SSH host is needed: locks, damaged state,
and what is never shown."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from orchestrator.state import FAILED, UP, ClusterRecord, cluster_key


def orchestrate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True,
                          text=True, timeout=120)


def test_second_up_on_a_locked_cluster_fails_clearly(tmp_path, state):
    path = tmp_path / "c.yaml"
    (tmp_path / "key").write_text("not used: the lock stops `up` first\n")
    path.write_text("cluster_name: locked\nprovider: {type: local, head_ip: 127.0.0.9, "
                    "worker_ips: []}\nauth: {ssh_user: u, ssh_private_key: key}\n")
    with state.store.lock("locked", action="up"):
        done = orchestrate("up", str(path), "-y")
    assert done.returncode == 1
    assert "busy" in done.stderr and "Traceback" not in done.stderr


def test_down_without_argument_needs_exactly_one_cluster(state):
    for name in ("one", "two"):
        state.store.write_cluster(ClusterRecord(name=name, provider="local", file="/x",
                                                config_hash="h"))
    done = orchestrate("down", "-y")
    assert done.returncode == 1
    assert "one, two" in done.stderr


def test_down_of_a_cluster_never_handed_to_ray_just_forgets_it(state):
    state.secrets.ensure(cluster_key("early"))
    state.store.write_cluster(ClusterRecord(name="early", provider="aws", file="/x",
                                            config_hash="h"))
    done = orchestrate("down", "early", "-y")
    assert done.returncode == 0, done.stderr
    assert state.store.read_cluster("early") is None
    assert not state.secrets.path(cluster_key("early")).exists()  # its token goes with it


def test_status_json_never_shows_the_token(state):
    state.secrets.ensure(cluster_key("s"))
    state.store.write_cluster(ClusterRecord(name="s", provider="local", file="/x",
                                            config_hash="h", state=FAILED,
                                            message="ray up failed"))
    done = orchestrate("status", "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows[0]["state"] == "failed" and rows[0]["live"]["reachable"] is False
    assert state.secrets.read(cluster_key("s")) not in done.stdout


@pytest.mark.parametrize("content, words", [
    ("[1, 2]", "corrupted: expected a JSON object"),
    ('{"name": "bad"}', "corrupted: missing provider, file, config_hash"),
    ('{"name": "bad", "provider": "local", "file": "/x", "config_hash": "h", '
     '"updated_at": "yesterday"}', "corrupted: 'updated_at' has the wrong type (str)"),
    ('{"name": "other", "provider": "local", "file": "/x", "config_hash": "h"}',
     "corrupted: it names cluster 'other', not 'bad'"),
    ("{not json", "unreadable"),
])
def test_a_damaged_record_is_a_clear_error_for_status_and_down(content, words, state):
    folder = state.store.cluster_dir("bad")
    folder.mkdir(parents=True)
    (folder / "record.json").write_text(content)
    for args in (["status"], ["status", "bad"], ["down", "bad", "-y"]):
        done = orchestrate(*args)
        assert done.returncode == 1, (args, done.stderr)
        assert f"{folder / 'record.json'} is {words}" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and f"remove {folder}" in done.stderr


def test_a_damaged_rendered_config_is_reported_not_a_crash(state):
    state.secrets.ensure(cluster_key("dmg"))
    state.store.write_cluster(ClusterRecord(name="dmg", provider="aws", file="/x",
                                            config_hash="h", state=UP, head_ip="127.0.0.1",
                                            dashboard_host="127.0.0.1"))
    state.store.rendered_path("dmg").write_text("[]")
    status = orchestrate("status", "--format", "json")
    assert status.returncode == 0, status.stderr
    assert "ray-cluster.yaml is corrupted" in json.loads(status.stdout)[0]["live"]["error"]
    down = orchestrate("down", "dmg", "-y")
    assert down.returncode == 1 and "Traceback" not in down.stderr
    assert "ray-cluster.yaml is corrupted: expected a JSON object" in down.stderr
    assert state.store.read_cluster("dmg").state == UP  # nothing was handed to `ray down`


def test_up_refused_by_preflight_launches_and_records_nothing(tmp_path, state):
    # Two loopback addresses nobody listens on: SSH is refused at once, so preflight fails
    # before `ray up` would start. (An sshd of the machine's own on 0.0.0.0:22 would answer.)
    for ip in ("127.0.0.77", "127.0.0.78"):
        with socket.socket() as probe:
            assert probe.connect_ex((ip, 22)) != 0, f"something listens on {ip}:22; this test " \
                "needs port 22 of loopback free (stop the machine's own sshd)"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")],
                   check=True)
    path = tmp_path / "refused.yaml"
    path.write_text("cluster_name: refused\n"
                    "provider: {type: local, head_ip: 127.0.0.77, worker_ips: [127.0.0.78]}\n"
                    "auth: {ssh_user: root, ssh_private_key: key}\n")
    done = orchestrate("up", str(path), "-y")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "preflight failed for refused (2 problems)" in done.stderr
    for line, field, ip in ((2, "provider.head_ip", "127.0.0.77"),
                            (2, "provider.worker_ips.0", "127.0.0.78")):
        assert f"{path}:{line}: {field}: root@{ip}: ssh: connect to host {ip} port 22: " \
               "Connection refused" in done.stderr
    assert "TIP   nothing was launched; fix the cluster YAML, or run with --skip-preflight" \
           in done.stderr
    # Nothing recorded, no token kept, nothing handed to Ray.
    assert state.store.read_cluster("refused") is None
    assert not state.secrets.path(cluster_key("refused")).exists()
    assert list(state.store.cluster_dir("refused").parent.glob("*")) == []
    assert json.loads(orchestrate("status", "--format", "json").stdout) == []


def test_a_cluster_autostop_took_down_is_stopped_in_status(state, capsys):
    """The record on this machine still says up; the head's watcher said why it stopped and
    Ray no longer answers: STATE says stopped (the JSON too, with what was recorded)."""
    from orchestrator import api
    from orchestrator.commands import status

    record = ClusterRecord(name="idle", provider="local", file="/x", config_hash="h", state=UP,
                           head_ip="127.0.0.9")
    down = {"reachable": False, "error": "no answer", "nodes_alive": 0, "nodes_dead": 0,
            "session": None}
    stopped = {"reason": "idle for 1 min", "stopped_at": 1.0}
    row = api._row(record, state, down, stopped)
    assert (row["state"], row["recorded_state"]) == ("stopped", "up")
    status._print_clusters([row])
    [line] = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("idle")]
    assert line.split()[2] == "stopped" and "no answer" not in line
    assert "stopped: idle for 1 min" in line
    # a watcher that has not finished its takedown, or a Ray that still answers: as recorded
    assert api._row(record, state, down, {"reason": "idle for 1 min"})["state"] == "up"
