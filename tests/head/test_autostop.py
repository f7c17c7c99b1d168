"""The autostop watcher's decision and what it reads on the head, without a Ray: the real
watcher on simulated hosts is tests/cluster/test_autostop.py."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from orchestrator.head import autostop, takedown
from orchestrator.head.autostop import Settings, decide

IDLE = Settings(idle_minutes=1)
UPTIME = Settings(max_uptime_minutes=60)
BOTH = Settings(idle_minutes=10, max_uptime_minutes=60)
T0 = 1_000_000.0


@pytest.mark.parametrize("rules, now, busy, idle_since, started, left, limit, reason", [
    # first poll, idle: the idle clock starts now
    (IDLE, T0, False, None, T0, 60, "idle", None),
    (IDLE, T0 + 59, False, T0, T0, 1, "idle", None),
    (IDLE, T0 + 60, False, T0, T0, 0, "idle", "idle for 1 min"),
    (IDLE, T0 + 600, False, T0, T0, 0, "idle", "idle for 1 min"),
    # a job (or a terminal) restarts the clock, and while busy no idle limit applies
    (IDLE, T0 + 600, True, T0, T0, None, None, None),
    (IDLE, T0 + 601, False, None, T0, 60, "idle", None),
    # max uptime counts from Ray's start, busy or not
    (UPTIME, T0 + 3599, True, None, T0, 1, "max_uptime", None),
    (UPTIME, T0 + 3600, True, None, T0, 0, "max_uptime", "max uptime 60 min reached"),
    # both: whichever ends first
    (BOTH, T0 + 100, False, T0, T0, 500, "idle", None),
    (BOTH, T0 + 3300, False, T0 + 3100, T0, 300, "max_uptime", None),
    (BOTH, T0 + 3600, True, None, T0, 0, "max_uptime", "max uptime 60 min reached"),
    (Settings(idle_minutes=0.5), T0 + 30, False, T0, T0, 0, "idle", "idle for 0.5 min"),
])
def test_decide(rules, now, busy, idle_since, started, left, limit, reason):
    verdict = decide(rules, now=now, busy=busy, idle_since=idle_since, started=started)
    assert verdict.seconds_left == left and verdict.limit == limit and verdict.reason == reason
    assert verdict.stop is (reason is not None)
    assert verdict.idle_since == (None if busy else (idle_since or now))


def test_settings_read_from_the_bootstrap_config():
    def config(autostop_):
        return {"metadata": {"orchestrate": {"autostop": autostop_}}}

    assert autostop.settings({}) is None
    assert autostop.settings(config({})) is None
    assert autostop.settings(config({"idle_minutes": 2})) == Settings(2.0, None, False)
    assert autostop.settings(config({"max_uptime_minutes": 5, "ignore_ssh_sessions": True})) == \
        Settings(None, 5.0, True)


def fake_proc(tmp_path: Path, processes: dict[int, tuple[str, str, int]]) -> Path:
    """A /proc with `btime` and, per pid, (comm, cmdline, starttime in ticks)."""
    proc = tmp_path / "proc"
    proc.mkdir(parents=True)
    (proc / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    for pid, (comm, cmdline, start) in processes.items():
        folder = proc / str(pid)
        folder.mkdir()
        (folder / "comm").write_text(comm + "\n")
        (folder / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
        rest = ["S"] + ["0"] * 18 + [str(start)] + ["0"] * 10   # field 22 is starttime
        (folder / "stat").write_text(f"{pid} ({comm}) " + " ".join(rest) + "\n")
    (proc / "self").mkdir()
    return proc


def test_ssh_sessions_with_a_terminal_count_and_the_launchers_do_not(tmp_path):
    proc = fake_proc(tmp_path, {
        10: ("sshd", "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups", 1),
        11: ("sshd", "sshd: root@pts/0", 1),
        12: ("sshd", "sshd: root@notty", 1),            # Ray's launcher, orchestrate's forwards
        13: ("sshd-session", "sshd-session: ray@pts/3", 1),
        14: ("bash", "bash --login -c -i ray stop", 1),
    })
    assert autostop.ssh_terminals(proc) == 2


def test_ray_started_is_the_gcs_servers_start(tmp_path):
    import os

    ticks = os.sysconf("SC_CLK_TCK")
    proc = fake_proc(tmp_path, {20: ("raylet", "raylet", 50 * ticks),
                                21: ("gcs_server", "gcs_server", 40 * ticks)})
    assert autostop.ray_started(proc) == 1700000040
    assert autostop.ray_started(fake_proc(tmp_path / "b", {20: ("raylet", "x", 1)})) is None


def test_dashboard_port_from_the_head_start_commands():
    assert autostop.dashboard_port({}) == 8265
    assert autostop.dashboard_port({"head_start_ray_commands": [
        "ray start --head --dashboard-port=9000 --dashboard-host=127.0.0.1"]}) == 9000


class JobApi(BaseHTTPRequestHandler):
    jobs: list[dict] = []
    seen: list[str | None] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        JobApi.seen.append(self.headers.get("Authorization"))
        body = json.dumps(JobApi.jobs).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def job_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), JobApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    JobApi.jobs, JobApi.seen = [], []
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def head_home(tmp_path, monkeypatch):
    """The watcher's files in a temporary home, and a /proc where Ray started at T0."""
    folder = tmp_path / ".orchestrate"
    folder.mkdir()
    for name, value in (("FOLDER", folder), ("STATUS_FILE", folder / "autostop.json"),
                        ("LOG_FILE", folder / "autostop.log"),
                        ("BOOTSTRAP", tmp_path / "ray_bootstrap_config.yaml"),
                        ("TOKEN_FILE", tmp_path / "auth_token")):
        monkeypatch.setattr(autostop, name, value)
    (tmp_path / "auth_token").write_text("secret-token\n")
    monkeypatch.setattr(autostop, "ray_started", lambda: T0)
    monkeypatch.setattr(autostop, "ssh_terminals", lambda: 0)
    return tmp_path


def write_config(home: Path, port: int, rules: dict | None) -> None:
    config = {"provider": {"type": "local", "worker_ips": []},
              "head_start_ray_commands": [f"ray start --head --dashboard-port={port}"],
              "metadata": {"orchestrate": {"autostop": rules}} if rules else {}}
    (home / "ray_bootstrap_config.yaml").write_text(json.dumps(config))


def test_a_poll_asks_the_job_api_with_the_token_and_writes_its_status(head_home, job_api,
                                                                      monkeypatch):
    stopped = []
    monkeypatch.setattr(autostop, "stop_cluster",
                        lambda config, reason, details, log: stopped.append((reason, details)))
    memory: dict = {}
    write_config(head_home, job_api, None)
    assert autostop.poll_once(memory, now=T0, log=print) is None
    assert json.loads(autostop.STATUS_FILE.read_text())["state"] == "off"

    write_config(head_home, job_api, {"idle_minutes": 1})   # added in place: read next poll
    JobApi.jobs = [{"status": "SUCCEEDED"}, {"status": "RUNNING"}]
    verdict = autostop.poll_once(memory, now=T0 + 10, log=print)
    assert verdict is not None and not verdict.stop and verdict.idle_since is None
    assert JobApi.seen[-1] == "Bearer secret-token"
    status = json.loads(autostop.STATUS_FILE.read_text())
    assert status["activity"] == ["1 job(s)"] and status["seconds_left"] is None

    JobApi.jobs = [{"status": "SUCCEEDED"}, {"status": "STOPPED"}]
    autostop.poll_once(memory, now=T0 + 20, log=print)
    assert json.loads(autostop.STATUS_FILE.read_text())["seconds_left"] == 60
    assert not stopped
    verdict = autostop.poll_once(memory, now=T0 + 80, log=print)
    assert verdict is not None and verdict.stop
    status = json.loads(autostop.STATUS_FILE.read_text())
    assert status["state"] == "stopped" and status["stopped"]["reason"] == "idle for 1 min"
    assert [reason for reason, _ in stopped] == ["idle for 1 min"]
    assert "secret-token" not in autostop.STATUS_FILE.read_text()


def test_a_job_api_that_does_not_answer_counts_as_activity(head_home, monkeypatch):
    write_config(head_home, 1, {"idle_minutes": 1})     # nothing listens on port 1
    memory: dict = {}
    for now in (T0, T0 + 600):
        verdict = autostop.poll_once(memory, now=now, log=print)
        assert verdict is not None and not verdict.stop and verdict.idle_since is None


def test_takedown_of_an_on_prem_cluster_stops_the_workers_then_the_head(monkeypatch):
    ran = []

    def run(argv, what, log):
        ran.append((argv, what))
        return True

    monkeypatch.setattr(takedown, "_run", run)
    config = {"provider": {"type": "local", "head_ip": "10.0.0.1",
                           "worker_ips": ["10.0.0.2", "10.0.0.3"]},
              "auth": {"ssh_user": "ray", "ssh_private_key": "~/ray_bootstrap_key.pem"}}
    takedown.take_down(config, "idle for 1 min", lambda _: None)
    whats = [what for _, what in ran]
    assert sorted(whats[:2]) == ["ray stop on 10.0.0.2", "ray stop on 10.0.0.3"]
    assert whats[2] == "ray stop on the head" and ran[2][0][-1] == "stop"
    argv = ran[0][0]
    assert argv[0] == "ssh" and argv[argv.index("-i") + 1].endswith("/ray_bootstrap_key.pem")
    assert argv[-2] in ("ray@10.0.0.2", "ray@10.0.0.3") and "ray stop" in argv[-1]
    assert "StrictHostKeyChecking=no" in argv


def test_status_summary_of_the_watchers_file():
    from orchestrator.cluster.health import summary
    from orchestrator.commands.status import _autostop

    watching = summary({"state": "watching", "checked_at": T0 + 300, "idle_since": T0,
                        "seconds_left": 1500.4, "limit": "idle"})
    assert watching["idle_seconds"] == 300 and watching["seconds_left"] == 1500
    assert _autostop(watching) == "idle 5 min, stops in 25 min (idle)"
    stopped = summary({"state": "stopped", "checked_at": T0, "idle_since": T0 - 60,
                       "seconds_left": 0, "limit": "idle",
                       "stopped": {"reason": "idle for 1 min", "at": T0 + 1}})
    assert stopped["reason"] == "idle for 1 min" and stopped["seconds_left"] is None
    assert _autostop(stopped) == "stopped: idle for 1 min"
    assert _autostop(None) == "-"
