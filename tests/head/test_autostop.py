"""The autostop watcher's decision and what it reads on the head, without a Ray: the real
watcher on simulated hosts is tests/cluster/test_autostop.py."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orchestrator.head import autostop, takedown
from orchestrator.head.autostop import Settings, decide
from tests.fake_ray import NO_SERVE, FakeRay
from tests.head.conftest import T0

IDLE = Settings(idle_minutes=1)
UPTIME = Settings(max_uptime_minutes=60)
BOTH = Settings(idle_minutes=10, max_uptime_minutes=60)


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
                                21: ("gcs_server", "gcs_server", 40 * ticks),
                                22: ("gcs_server", "gcs_server", 10 * ticks)})  # one left over
    assert autostop.ray_started(proc) == 1700000040   # the newest: uptime is never overstated
    assert autostop.ray_started(fake_proc(tmp_path / "b", {20: ("raylet", "x", 1)})) is None


def test_dashboard_port_from_the_head_start_commands():
    assert autostop.dashboard_port({}) == 8265
    assert autostop.dashboard_port({"head_start_ray_commands": [
        "ray start --head --dashboard-port=9000 --dashboard-host=127.0.0.1"]}) == 9000


# The fake the `job_api` fixture started (tests/fake_ray.py): the head's dashboard as the watcher
# asks it, the job API and Serve's REST API (by default Serve never started). A test sets its
# job table (`table`) and Serve's answer (`serve`), and reads the headers it was sent (`seen`).
API: FakeRay


@pytest.fixture
def job_api(dashboard):
    """The port of the head's dashboard: the fake Ray, behind a listener proven Ray's
    dashboard."""
    global API
    with FakeRay() as fake:
        API = fake
        fake.table = []
        yield dashboard(fake.port)


def write_config(home: Path, port: int, rules: dict | None) -> None:
    config = {"provider": {"type": "local", "worker_ips": []},
              "head_start_ray_commands": [f"ray start --head --dashboard-port={port}"],
              "metadata": {"orchestrate": {"autostop": rules}} if rules else {}}
    (home / "ray_bootstrap_config.yaml").write_text(json.dumps(config))


def test_a_poll_asks_the_job_api_with_the_token_and_writes_its_status(head_home, job_api, stops):
    memory: dict = {}
    write_config(head_home, job_api, None)
    assert autostop.poll_once(memory, now=T0, log=print) is None
    assert json.loads(autostop.STATUS_FILE.read_text())["state"] == "off"

    write_config(head_home, job_api, {"idle_minutes": 1})   # added in place: read next poll
    API.table = [{"status": "SUCCEEDED"}, {"status": "RUNNING"}]
    verdict = autostop.poll_once(memory, now=T0 + 10, log=print)
    assert verdict is not None and not verdict.stop and verdict.idle_since is None
    assert API.seen[-1] == "Bearer secret-token"
    status = json.loads(autostop.STATUS_FILE.read_text())
    assert status["activity"] == ["1 job(s)"] and status["seconds_left"] is None

    API.table = [{"status": "SUCCEEDED"}, {"status": "STOPPED"}]
    autostop.poll_once(memory, now=T0 + 20, log=print)
    assert json.loads(autostop.STATUS_FILE.read_text())["seconds_left"] == 60
    assert not stops["down"]
    verdict = autostop.poll_once(memory, now=T0 + 80, log=print)
    assert verdict is not None and verdict.stop and memory["ended"]
    status = json.loads(autostop.STATUS_FILE.read_text())
    assert status["state"] == "stopped" and status["stopped"]["reason"] == "idle for 1 min"
    assert stops["archived"] == stops["down"] == ["idle for 1 min"]
    assert "secret-token" not in autostop.STATUS_FILE.read_text()


@pytest.mark.parametrize("answer, busy", [
    ((200, NO_SERVE), False),                                   # Serve never started
    ((501, "Serve dependencies are not installed."), False),    # no ray[serve]: none can run
    ((200, {**NO_SERVE, "applications": {"llm": {"status": "RUNNING"}}}), True),
    ((200, {**NO_SERVE, "applications": {"llm": {"status": "DEPLOY_FAILED"}}}), True),
    ((200, {**NO_SERVE, "applications": {"llm": {"status": "DELETING"}}}), False),
    ((500, "Traceback ..."), True),                             # Serve's API broken: unseen
    ((200, "<html>"), True),
], ids=["never-started", "not-installed", "running", "failed", "deleting", "error", "not-json"])
def test_serve_applications_are_activity(head_home, job_api, stops, answer, busy):
    write_config(head_home, job_api, {"idle_minutes": 1})
    API.serve = answer
    memory: dict = {}
    for now in (T0, T0 + 600):
        verdict = autostop.poll_once(memory, now=now, log=print)
    assert verdict is not None and verdict.stop is not busy
    assert bool(stops["down"]) is not busy
    if busy:
        [said] = json.loads(autostop.STATUS_FILE.read_text())["activity"]
        assert "Serve" in said


def test_an_idle_stop_is_abandoned_when_the_head_got_busy_while_archiving(
        head_home, job_api, stops, monkeypatch):
    write_config(head_home, job_api, {"idle_minutes": 1})
    said: list[str] = []
    memory: dict = {}

    def archive(config, reason, details, log):   # a job arrives while the logs are archived
        stops["archived"].append(reason)
        API.table = [{"status": "PENDING"}]

    monkeypatch.setattr(autostop, "archive_logs", archive)
    autostop.poll_once(memory, now=T0, log=said.append)
    verdict = autostop.poll_once(memory, now=T0 + 60, log=said.append)
    assert verdict is not None and verdict.stop and not memory.get("ended")
    assert stops["archived"] == ["idle for 1 min"] and stops["down"] == []
    assert "autostop abandoned: 1 job(s) after archiving" in said[-1]
    status = json.loads(autostop.STATUS_FILE.read_text())
    assert status["state"] == "watching" and status["idle_since"] is None
    API.table = []                                             # the clock starts again
    verdict = autostop.poll_once(memory, now=T0 + 100, log=said.append)
    assert verdict is not None and not verdict.stop and verdict.seconds_left == 60


def test_a_max_uptime_stop_goes_ahead_whatever_runs(head_home, job_api, stops, monkeypatch):
    write_config(head_home, job_api, {"max_uptime_minutes": 1})
    API.table = [{"status": "RUNNING"}]
    memory: dict = {}
    autostop.poll_once(memory, now=T0 + 60, log=print)
    assert stops["down"] == ["max uptime 1 min reached"] and memory["ended"]


def failed_once(home: Path, port: int, stops: dict) -> dict:
    """An idle stop whose first takedown fails (the next fails too, the third succeeds): the
    watcher's memory after it."""
    write_config(home, port, {"idle_minutes": 1})
    stops["ok"] = [False, False, True]
    memory: dict = {}
    autostop.poll_once(memory, now=T0, log=print)
    autostop.poll_once(memory, now=T0 + 60, log=print)
    return memory


def test_a_failed_takedown_is_said_and_tried_again_later_even_with_ray_stopped(
        head_home, job_api, stops, monkeypatch):
    memory = failed_once(head_home, job_api, stops)
    status = json.loads(autostop.STATUS_FILE.read_text())
    assert status["state"] == "takedown-failed" and not memory.get("ended")
    assert status["error"] == "ray stop on 10.0.0.2 failed (255): refused"
    assert status["takedown"] == {"reason": "idle for 1 min", "attempts": 1,
                                  "next_attempt_at": T0 + 60 + autostop.RETRY_FIRST_S}
    monkeypatch.setattr(autostop, "ray_started", lambda: None)   # the takedown stopped Ray here
    autostop.poll_once(memory, now=T0 + 61, log=print)           # not yet
    assert len(stops["down"]) == 1
    autostop.poll_once(memory, now=T0 + 120, log=print)
    status = json.loads(autostop.STATUS_FILE.read_text())
    assert len(stops["down"]) == 2 and status["takedown"]["attempts"] == 2
    assert status["takedown"]["next_attempt_at"] == T0 + 120 + 2 * autostop.RETRY_FIRST_S
    autostop.poll_once(memory, now=T0 + 240, log=print)
    status = json.loads(autostop.STATUS_FILE.read_text())
    assert status["state"] == "stopped" and memory["ended"] and len(stops["down"]) == 3
    assert stops["archived"] == ["idle for 1 min"]                  # archived once
    assert [autostop.retry_delay(n) for n in (1, 2, 3, 4, 5, 9)] == \
        [60, 120, 240, 480, 900, 900]


def test_a_job_api_that_does_not_answer_counts_as_activity(head_home, monkeypatch):
    write_config(head_home, 1, {"idle_minutes": 1})     # nothing listens on port 1
    memory: dict = {}
    for now in (T0, T0 + 600):
        verdict = autostop.poll_once(memory, now=now, log=print)
        assert verdict is not None and not verdict.stop and verdict.idle_since is None


@pytest.fixture
def ran(monkeypatch):
    """The takedown's commands, recorded; those of the hosts in `ran.failing` fail."""
    class Ran(list):
        failing: set[str] = set()

    found = Ran()

    def run(argv, what, log):
        found.append((argv, what))
        ok = not any(host in what for host in found.failing)
        log(f"{what}: done" if ok else f"{what} failed (255): refused")
        return ok

    monkeypatch.setattr(takedown, "_run", run)
    monkeypatch.setattr(takedown, "BOOTSTRAP", Path("/nonexistent/ray_bootstrap_config.yaml"))
    return found


def test_takedown_of_an_on_prem_cluster_stops_the_head_then_the_workers(ran):
    config = {"provider": {"type": "local", "head_ip": "10.0.0.1",
                           "worker_ips": ["10.0.0.2", "10.0.0.3"]},
              "auth": {"ssh_user": "ray", "ssh_private_key": "~/ray_bootstrap_key.pem",
                       "ssh_proxy_command": "ssh -W %h:%p 'bastion host'"}}
    said: list[str] = []
    assert takedown.take_down(config, "idle for 1 min", said.append) is True
    whats = [what for _, what in ran]
    # the head first: its autoscaler must not start Ray again on a worker meanwhile
    assert whats[0] == "ray stop on the head" and ran[0][0][-1] == "stop"
    assert sorted(whats[1:]) == ["ray stop on 10.0.0.2", "ray stop on 10.0.0.3"]
    argv = ran[1][0]
    assert argv[0] == "ssh" and argv[argv.index("-i") + 1].endswith("/ray_bootstrap_key.pem")
    assert argv[-2] in ("ray@10.0.0.2", "ray@10.0.0.3") and "ray stop" in argv[-1]
    assert "StrictHostKeyChecking=no" in argv
    assert "ProxyCommand=ssh -W %h:%p 'bastion host'" in argv   # one argument: no local shell

    ran.clear()
    ran.failing = {"10.0.0.3"}
    said.clear()
    assert takedown.take_down(config, "idle for 1 min", said.append) is False
    assert said[-1] == "Ray could not be stopped on 10.0.0.3"


def test_on_prem_is_the_provider_type_not_the_worker_ips(ran):
    """A `local` cluster without worker_ips is on-prem all the same (never the cloud path)."""
    assert takedown.take_down({"provider": {"type": "local", "head_ip": "10.0.0.1"}}, "x",
                              print) is True
    assert [what for _, what in ran] == ["ray stop on the head"]
    said: list[str] = []   # and a cloud cluster is never taken for on-prem, worker_ips or not
    assert takedown.take_down({"provider": {"type": "aws", "region": "us-east-1",
                                            "worker_ips": ["10.0.0.2"]}}, "x", said.append) is False
    assert len(ran) == 1 and "cannot read the bootstrap config" in said[-1]


def test_with_a_coordinator_the_workers_are_the_nodes_it_gave_the_cluster(ran, tmp_path,
                                                                        monkeypatch):
    """Ray's own on-prem coordinator server (in this process, its state files in tmp_path)
    and Ray's node provider asking it over HTTP."""
    import socket

    from ray.autoscaler._private.local.coordinator_node_provider import (
        CoordinatorSenderNodeProvider,
    )
    from ray.autoscaler.local.coordinator_server import OnPremCoordinatorServer
    from ray.autoscaler.tags import NODE_KIND_HEAD, NODE_KIND_WORKER, TAG_RAY_NODE_KIND

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = OnPremCoordinatorServer(["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"],
                                     "127.0.0.1", port)
    try:
        provider = {"type": "local", "coordinator_address": f"127.0.0.1:{port}"}
        for cluster, kind, count in (("c1", NODE_KIND_HEAD, 1), ("c1", NODE_KIND_WORKER, 2),
                                     ("c2", NODE_KIND_HEAD, 1)):
            CoordinatorSenderNodeProvider(provider, cluster).create_node(
                {}, {TAG_RAY_NODE_KIND: kind}, count)
        config = {"cluster_name": "c1", "provider": provider, "auth": {"ssh_user": "ray"}}
        assert takedown.take_down(config, "idle", print) is True
        whats = [what for _, what in ran]
        assert whats[0] == "ray stop on the head"
        workers = sorted(what.removeprefix("ray stop on ") for what in whats[1:])
        assert len(workers) == 2 and set(workers) < {"127.0.0.2", "127.0.0.3", "127.0.0.4",
                                                      "127.0.0.5"}
    finally:
        server.shutdown()

    ran.clear()   # the coordinator gone: the head only, and a failure that says why
    said: list[str] = []
    assert takedown.take_down(config, "idle", said.append) is False
    assert [what for _, what in ran] == ["ray stop on the head"]
    assert any(f"the coordinator at 127.0.0.1:{port} did not list" in line for line in said)
    assert said[-1] == "Ray could not be stopped on the workers (not listed)"


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
    failed = summary({"state": "takedown-failed", "checked_at": T0, "idle_since": T0 - 60,
                      "seconds_left": 0, "limit": "idle", "error": "ray stop on x failed",
                      "takedown": {"reason": "idle for 1 min", "attempts": 2,
                                   "next_attempt_at": T0 + 120}})
    assert failed["takedown_error"] == "ray stop on x failed" and failed["seconds_left"] is None
    assert _autostop(failed) == "takedown failed: ray stop on x failed (retrying)"
    assert _autostop(None) == "-"
    # read 10 minutes after its last poll: the watcher died; a stopped cluster's file is final
    silent = summary({"state": "watching", "checked_at": T0, "idle_since": T0 - 60,
                      "seconds_left": 1500, "limit": "idle"}, now=T0 + 600)
    assert silent["state"] == "silent" and silent["silent_seconds"] == 600
    assert _autostop(silent).startswith("unknown (the watcher has written nothing for 600 s")
    assert summary({"state": "watching", "checked_at": T0}, now=T0 + 15)["state"] == "watching"
    assert summary({"state": "stopped", "checked_at": T0, "stopped": {"reason": "x", "at": T0}},
                   now=T0 + 9000)["reason"] == "x"


def test_a_failed_takedown_backs_off_while_ray_runs_and_is_given_up_when_the_head_is_used_again(
        head_home, job_api, stops, monkeypatch):
    memory = failed_once(head_home, job_api, stops)      # fails before Ray was stopped
    assert len(stops["down"]) == 1
    autostop.poll_once(memory, now=T0 + 70, log=print)    # still idle: waits for its backoff
    status = json.loads(autostop.STATUS_FILE.read_text())
    assert len(stops["down"]) == 1 and status["state"] == "takedown-failed"
    assert status["takedown"]["attempts"] == 1 and status["error"].startswith("ray stop on")
    autostop.poll_once(memory, now=T0 + 60 + autostop.RETRY_FIRST_S, log=print)
    assert len(stops["down"]) == 2                       # tried again, and failed again
    assert json.loads(autostop.STATUS_FILE.read_text())["takedown"]["attempts"] == 2

    # `up` started Ray again and a job runs on it: the failed stop is not carried out later
    monkeypatch.setattr(autostop, "ray_started", lambda: T0 + 200)
    API.table = [{"status": "RUNNING"}]
    for now in (T0 + 210, T0 + 2000):
        verdict = autostop.poll_once(memory, now=now, log=print)
        assert verdict is not None and not verdict.stop
    status = json.loads(autostop.STATUS_FILE.read_text())
    assert status["state"] == "watching" and len(stops["down"]) == 2
    assert "takedown" not in memory and "backoff" not in memory
    API.table = []                                     # idle again: a new decision, made anew
    autostop.poll_once(memory, now=T0 + 2010, log=print)
    autostop.poll_once(memory, now=T0 + 2070, log=print)
    assert len(stops["down"]) == 3 and memory["ended"]


def test_a_failed_takedown_is_given_up_when_autostop_is_removed(head_home, job_api, stops):
    write_config(head_home, job_api, {"max_uptime_minutes": 1})
    stops["ok"] = [False, True]
    memory: dict = {}
    autostop.poll_once(memory, now=T0 + 60, log=print)
    assert len(stops["down"]) == 1 and not memory.get("ended")
    write_config(head_home, job_api, None)               # `up` without autostop, in place
    for now in (T0 + 60 + autostop.RETRY_FIRST_S, T0 + 5000):
        autostop.poll_once(memory, now=now, log=print)
    assert len(stops["down"]) == 1
    assert json.loads(autostop.STATUS_FILE.read_text())["state"] == "off"


def test_a_job_that_came_and_went_between_two_polls_is_activity(head_home, job_api, stops):
    write_config(head_home, job_api, {"idle_minutes": 1})
    memory: dict = {}
    autostop.poll_once(memory, now=T0, log=print)
    assert memory["idle_since"] == T0
    # a short job, started and ended between the polls: never seen RUNNING
    API.table = [{"status": "SUCCEEDED", "start_time": (T0 + 20) * 1000,
                    "end_time": (T0 + 40) * 1000},
                   {"status": "FAILED", "start_time": (T0 - 900) * 1000,
                    "end_time": (T0 - 800) * 1000}]               # before: not activity
    verdict = autostop.poll_once(memory, now=T0 + 60, log=print)
    assert verdict is not None and not verdict.stop and stops["down"] == []
    assert json.loads(autostop.STATUS_FILE.read_text())["activity"] == ["1 job(s)"]
    verdict = autostop.poll_once(memory, now=T0 + 70, log=print)   # idle from then on
    assert verdict is not None and verdict.seconds_left == 60


def test_the_idle_clock_starts_when_up_finishes(head_home, job_api, stops):
    """Workers joining and setup commands are not idleness: until `orchestrate up` touches its
    file (after Ray started), the head is busy, for at most UP_GRACE_S; an `up` that changed
    the cluster again restarts the idle clock."""
    write_config(head_home, job_api, {"idle_minutes": 1})
    up_done = head_home / ".orchestrate" / "up-done"
    up_done.unlink()
    memory: dict = {}
    verdict = autostop.poll_once(memory, now=T0 + 120, log=print)   # past the idle limit
    assert not verdict.stop and verdict.idle_since is None
    assert json.loads(autostop.STATUS_FILE.read_text())["activity"] == [
        "`orchestrate up` not finished"]
    up_done.touch()
    os.utime(up_done, (T0 + 125, T0 + 125))          # `up` finished
    assert autostop.poll_once(memory, now=T0 + 130, log=print).idle_since == T0 + 130
    os.utime(up_done, (T0 + 150, T0 + 150))          # `up` ran again, changing something
    assert autostop.poll_once(memory, now=T0 + 160, log=print).idle_since is None
    verdict = autostop.poll_once(memory, now=T0 + 170, log=print)
    assert verdict.idle_since == T0 + 170 and not verdict.stop
    assert autostop.poll_once(memory, now=T0 + 231, log=print).stop
    assert stops["archived"] == stops["down"] == ["idle for 1 min"]


def test_an_up_that_never_finishes_holds_the_idle_clock_only_so_long(tmp_path):
    """A file older than this Ray (an earlier `up`) or none: `up` is running, until the grace
    ends (an `up` that failed half-way must not keep its cluster for ever)."""
    started, up_done = 1_000_000.0, tmp_path / "up-done"
    assert autostop.up_activity(started, now=started + 60, since=None, path=up_done) == [
        "`orchestrate up` not finished"]
    assert autostop.up_activity(started, now=started + autostop.UP_GRACE_S, since=None,
                                path=up_done) == []
    up_done.touch()
    os.utime(up_done, (started - 600, started - 600))     # the last `up`, before Ray restarted
    assert autostop.up_activity(started, now=started + 60, since=started + 30,
                                path=up_done) == ["`orchestrate up` not finished"]
    os.utime(up_done, (started + 40, started + 40))
    assert autostop.up_activity(started, now=started + 60, since=started + 30,
                                path=up_done) == ["`orchestrate up` ran"]
    assert autostop.up_activity(started, now=started + 60, since=started + 50,
                                path=up_done) == []
