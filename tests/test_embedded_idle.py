"""The warm embedded Ray: it outlives its run, is reused, stays up while a job runs, stops by
itself once idle for ORCHESTRATE_EMBEDDED_RAY_IDLE, is replaced cleanly after a crash, shows in
`orchestrate status`, and `stop --embedded` ends it with its watchdog."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.errors import OrchestrateError
from orchestrator.reach import embedded, idle, watchdog
from orchestrator.state import State
from orchestrator.util.waiting import until
from tests.helpers import jobs_client
from tests.test_embedded import ray_processes


def secrets():
    return State.here().secrets


@pytest.mark.parametrize(("text", "seconds"), [
    ("10m", 600), ("90s", 90), ("1h", 3600), ("1.5h", 5400), ("5", 300), ("0", 0), ("0s", 0),
    (" 2 M ", 120)])
def test_durations(text, seconds):
    assert idle.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["abc", "-1", "10x", "1e3", "m", "10 minutes", "1h30m"])
def test_a_bad_duration_is_refused_naming_the_variable(text):
    with pytest.raises(OrchestrateError) as caught:
        idle.limit({idle.VARIABLE: text})
    assert idle.VARIABLE in caught.value.message and repr(text) in caught.value.message
    assert f"{idle.VARIABLE}=10m" in caught.value.hint


def test_unset_or_empty_is_the_default():
    assert idle.limit({}) == idle.limit({idle.VARIABLE: " "}) == 600


def test_the_old_name_of_the_variable_is_still_read_and_the_new_one_wins():
    assert idle.VARIABLE == "ORCHESTRATE_EMBEDDED_RAY_IDLE"
    assert idle.limit({"ORCHESTRATE_LOCAL_RAY_IDLE": "90s"}) == 90
    assert idle.limit({"ORCHESTRATE_LOCAL_RAY_IDLE": "90s", idle.VARIABLE: "2m"}) == 120
    with pytest.raises(OrchestrateError) as caught:
        idle.limit({"ORCHESTRATE_LOCAL_RAY_IDLE": "soon"})
    assert "ORCHESTRATE_LOCAL_RAY_IDLE='soon'" in caught.value.message   # the one the user set


def test_a_bad_value_is_a_clear_error_at_the_command_line(monkeypatch, capsys):
    monkeypatch.setenv(idle.VARIABLE, "soon")
    assert main(["dashboard", "--embedded", "--no-browser"]) == 1
    err = capsys.readouterr().err
    assert idle.VARIABLE in err and "Traceback" not in err


REPORT = {"address": "http://127.0.0.1:40001", "pid": 4321, "num_cpus": 4, "busy": False,
          "sessions": 0, "jobs": 0, "services": 0, "idle_limit": 600.0, "keep": False,
          "idle_since": 1000.0, "stops_at": 1600.0, "watchdog": True}


def test_the_status_line():
    line = idle.describe(REPORT, now=1125.0)
    stop_at = time.strftime("%H:%M:%S", time.localtime(1600.0))
    assert line == ("the embedded Ray: http://127.0.0.1:40001, pid 4321, 4 CPUs; idle for 2m 5s; "
                    f"stops at {stop_at} (in 7m 55s) unless used")
    busy = {**REPORT, "busy": True, "jobs": 2, "services": 1, "sessions": 1, "idle_since": None,
            "stops_at": None}
    assert idle.describe(busy, now=1125.0).endswith(
        "busy (2 jobs running, 1 service, 1 session); stops once idle for 10m")
    kept = {**REPORT, "idle_limit": 0.0, "keep": True, "stops_at": None}
    assert idle.describe(kept).endswith("kept until `orchestrate stop --embedded`")
    deaf = {**REPORT, "busy": None, "idle_since": None, "stops_at": None}
    assert "its dashboard did not answer" in idle.describe(deaf)
    orphan = {**REPORT, "watchdog": False}
    assert "watchdog is not running" in idle.describe(orphan)


def test_status_shows_the_embedded_ray_after_the_clusters(monkeypatch, capsys):
    from orchestrator.commands import status

    monkeypatch.setattr(status, "_embedded", lambda state: REPORT)
    assert main(["status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "no clusters recorded"
    assert lines[1].startswith("the embedded Ray: http://127.0.0.1:40001, pid 4321")
    assert main(["status", "--format", "json"]) == 0   # the clusters' list, as before
    assert json.loads(capsys.readouterr().out) == []
    assert main(["status", "--embedded", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == REPORT


def test_status_without_an_embedded_ray(capsys):
    assert main(["status"]) == 0
    assert capsys.readouterr().out == "no clusters recorded\n"
    assert main(["status", "--embedded", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) is None
    assert not embedded.record_path().parent.exists()   # looking created nothing


def test_the_watchdog_clears_after_a_ray_that_died():
    """A stand-in for the Ray (a process whose command line names its temp dir, as Ray's do):
    when it dies, its watchdog removes what is left (processes naming the temp dir, the folder,
    the record, the token) and exits."""
    private = tempfile.mkdtemp(prefix="orc-", dir="/tmp")
    temp_dir = os.path.join(private, "ray")
    os.mkdir(temp_dir)
    head = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", temp_dir],
                            start_new_session=True)
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)",
                             f"--log-dir={temp_dir}/logs"], start_new_session=True)
    guard = None
    try:
        secrets().put(embedded.TOKEN_KEY, uuid.uuid4().hex)
        guard = idle.spawn(head.pid, Path(private))
        embedded._write_record(embedded.EmbeddedRay(
            "http://127.0.0.1:9", "127.0.0.1:9", head.pid, temp_dir, 2, idle_limit=60.0,
            last_used=time.time(), watchdog=guard), secrets())
        assert until(lambda: idle.is_watchdog(guard, head.pid), timeout=30)
        head.kill()
        head.wait()
        assert until(lambda: not embedded.record_path().exists(), timeout=60)
        assert until(lambda: not idle.is_watchdog(guard, head.pid), timeout=30)
        assert left.wait(30) == -signal.SIGKILL   # it named the temp dir
        assert not os.path.exists(private)
        assert not secrets().path(embedded.TOKEN_KEY).exists()
    finally:
        for process in (head, left):
            if process.poll() is None:
                process.kill()
                process.wait()
        if guard and idle.is_watchdog(guard, head.pid):
            os.kill(guard, signal.SIGKILL)
        subprocess.run(["rm", "-rf", private], check=False)


def watchdog_account(ray: embedded.EmbeddedRay, guard: int) -> str:
    """What the watchdog `guard` of `ray` said (its log in the Ray's private folder) and what
    runs under its pid: why it is not the live watchdog a test expected."""
    import psutil

    log = embedded._private(ray) / "watchdog.log"   # where reach.idle.spawn writes it
    said = log.read_text(errors="replace")[-3000:] if log.exists() else f"(no {log})"
    try:
        process = psutil.Process(guard)
        runs = f"{' '.join(process.cmdline())} ({process.status()})"
    except psutil.Error:
        runs = "nothing"
    return f"watchdog {guard} of the Ray {ray.pid}: {runs} runs under its pid; its log:\n{said}"


def gone(ray: embedded.EmbeddedRay, guard: int) -> bool:
    return (not embedded.record_path().exists() and not ray_processes(ray.temp_dir)
            and not os.path.exists(os.path.dirname(ray.temp_dir))
            and not idle.is_watchdog(guard, ray.pid))


@pytest.mark.ray
@pytest.mark.own_ray
def test_warm_reused_busy_with_a_job_idle_stopped_crashed_replaced_and_stopped(monkeypatch,
                                                                              capsys):
    """Three embedded Rays (~10 s each to start). A limit of 1m while the test looks at a warm
    Ray, 3s for the idle stop."""
    monkeypatch.setenv(idle.VARIABLE, "1m")
    rays: list[embedded.EmbeddedRay] = []
    try:
        # 1. warm after its session; reused; kept up by a running job; then stopped when idle
        with embedded.session(secrets()) as (ray, started):
            assert started
            rays.append(ray)
        warm = embedded.current(secrets())
        assert warm is not None and warm.pid == ray.pid and warm.idle_limit == 60
        guard = warm.watchdog
        assert idle.is_watchdog(guard, ray.pid), watchdog_account(ray, guard)
        # Ray's first answer about Serve takes ~2 s: until then status cannot tell
        assert until(lambda: watchdog.report(secrets())["busy"] is False, timeout=30)
        assert watchdog.report(secrets())["stops_at"] is not None
        assert main(["status"]) == 0
        out = capsys.readouterr().out
        assert "idle for" in out and "stops at" in out, out
        monkeypatch.setenv(idle.VARIABLE, "3s")   # the sessions set the limit in force
        with embedded.session(secrets()) as (again, started):
            assert not started and again.pid == ray.pid and again.watchdog == guard
            assert watchdog.report(secrets())["sessions"] == 1
            jobs = jobs_client(again)
            job = f"sleeper-{uuid.uuid4().hex[:8]}"
            jobs.submit(entrypoint=f"{sys.executable} -c 'import time; time.sleep(6)'",
                        runtime_env={}, submission_id=job)
        left_at = time.time()
        assert until(lambda: jobs.status(job) == "RUNNING", timeout=60)
        assert "1 job running" in idle.describe(watchdog.report(secrets()))
        assert jobs._wait(job) == "SUCCEEDED"
        assert time.time() - left_at > 3   # the job outlived the limit...
        assert embedded.running(ray)       # ...and so did the Ray
        assert until(lambda: gone(ray, guard), timeout=60), "not stopped once idle"

        # 2. killed (its watchdog with it): the next session notices, clears, starts another
        monkeypatch.setenv(idle.VARIABLE, "1m")
        said: list[str] = []
        with embedded.session(secrets()) as (second, started):
            assert started and second.pid != ray.pid
            rays.append(second)
        os.kill(second.watchdog, signal.SIGKILL)
        os.killpg(second.pid, signal.SIGKILL)
        assert until(lambda: not embedded.running(second), timeout=30)
        with embedded.session(secrets(), progress=said.append) as (third, started):
            assert started and third.pid not in (ray.pid, second.pid)
            rays.append(third)
            assert said == [f"the embedded Ray (pid {second.pid}) had stopped; starting another"]
            assert not os.path.exists(os.path.dirname(second.temp_dir))
            assert not ray_processes(second.temp_dir)

        # 3. `stop --embedded` ends the warm Ray now, and its watchdog
        guard = embedded.current(secrets()).watchdog
        assert idle.is_watchdog(guard, third.pid), watchdog_account(third, guard)
        assert main(["stop", "--local-ray"]) == 0
        assert until(lambda: gone(third, guard), timeout=30)
        assert watchdog.report(secrets()) is None
    finally:
        embedded.shutdown(secrets())
        for ray in rays:
            if os.path.isdir(os.path.dirname(ray.temp_dir)):
                embedded.stop(ray)
