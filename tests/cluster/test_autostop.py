"""Autostop on real heads over real SSH: the watcher that `up` starts on the head takes an
on-prem cluster down by itself, when idle (never while a job runs) and at its maximum uptime
(even with a job running), archiving the logs first, so `orchestrate logs` still answers. Both
clusters at once, to pay the waiting once. The idle limit is half a minute (the same code as a
whole minute: the limit is minutes, fractions allowed) so that the job that outlives it, and the
wait after it, stay short."""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from orchestrator.util.waiting import until

from .conftest import launch, tear_down

pytestmark = [pytest.mark.ssh]

# The watcher polls every second on these hosts (10 s by default), so a limit is seen at once.
FAST_POLL = {"environment": {"ORCHESTRATE_AUTOSTOP_POLL_S": "1"}}
# The idle clock starts when `up` ends, and the test's job must reach the head before it runs
# out: with a quarter of a minute, submitting it through the SSH forward once took longer on a
# loaded machine, and the watcher rightly stopped the idle cluster first.
IDLE_MINUTES = 0.5
IDLE_LIMIT_S = IDLE_MINUTES * 60
BUSY_FOR_S = 45         # a job longer than the idle limit: the cluster must outlive it
# max_uptime_minutes, counted from Ray's start on the head: the job submitted after `up` must
# have printed by then for `logs` to find its words in the archive. With a minute, on a machine
# a third slower with the other ssh tests and the many tier beside it, `up` and the job's start
# took all of it and the archived log was empty.
UPTIME_MINUTES = 1.5
SAID = "kept-by-autostop"


def status_of(handle) -> dict:
    done = handle.cli("status", handle.name, "--format", "json")
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)
    return row


def submit(handle, entrypoint: str) -> str:
    """A job through the head's SSH forward, as orchestrate submits them; its id."""
    from ray.job_submission import JobSubmissionClient

    with handle.open() as endpoint:
        return JobSubmissionClient(endpoint.address, headers=handle.headers).submit_job(
            entrypoint=entrypoint)


def job_status(handle, job: str) -> str:
    from ray.job_submission import JobSubmissionClient

    with handle.open() as endpoint:
        return str(JobSubmissionClient(endpoint.address, headers=handle.headers)
                   .get_job_status(job))


def watched(handle, since: float = 0.0) -> list[dict]:
    """`status`'s autostop rows until the head's watcher has polled once after `since` (the
    hosts share this machine's clock), or has taken the cluster down (it polls no more), or 60
    rows: a row says what the watcher saw at its last poll, which on a busy machine can be
    seconds old."""
    rows = [status_of(handle)["autostop"]]
    while (rows[-1].get("state") != "watching" or (rows[-1].get("checked_at") or 0) < since) \
            and rows[-1].get("stopped_at") is None and len(rows) < 60:
        time.sleep(1)
        rows.append(status_of(handle)["autostop"])
    return rows


def test_clusters_stop_themselves_when_idle_and_at_their_max_uptime(make_machine, tmp_path):
    started = time.monotonic()
    shared = Path(tempfile.mkdtemp(prefix="orc-shared-", dir="/tmp"))   # every host sees it
    shared.chmod(0o755)
    idle_machine = make_machine(count=2, options={1: FAST_POLL})   # workers must be stopped too
    uptime_machine = make_machine(count=1, options={1: FAST_POLL})
    handles = []
    try:
        # Each cluster gets its job as soon as it is up (the idle clock starts when `up` ends): one
        # that outlives the uptime limit, and one longer than the idle limit.
        submitted_after: dict[str, float] = {}   # seconds from `up`'s end to the job's submission

        def up(machine, name, autostop, entrypoint, **archive):
            handle = launch(machine, tmp_path / name, f"{name}-{machine.name}", autostop=autostop,
                            **archive)
            handles.append(handle)
            ended = time.monotonic()
            job = submit(handle, entrypoint)
            submitted_after[name] = round(time.monotonic() - ended, 1)
            return handle, job

        with ThreadPoolExecutor(2) as pool:
            idle_up = pool.submit(up, idle_machine, "idle", {"idle_minutes": IDLE_MINUTES},
                                  f"echo {SAID}; sleep {BUSY_FOR_S}", archive=f"file://{shared}")
            # no `archive:`: the head's own folder, which outlives the cluster on-prem
            uptime_up = pool.submit(up, uptime_machine, "uptime",
                                    {"max_uptime_minutes": UPTIME_MINUTES, "idle_minutes": 60},
                                    f"echo {SAID}-uptime; sleep 600")
            (uptime, forever) = uptime_up.result()
            first_look = pool.submit(watched, uptime)   # while the other may still be starting
            (idle, busy) = idle_up.result()
        # `status` shows the watcher's view: the uptime limit counting (asked first: on a busy
        # machine the minute may be over by the time the idle cluster's job runs), then busy
        # (no idle time).
        # The uptime counts from Ray's start on the head, and `up` goes on after it (on a
        # machine this busy `up` plus the first poll once took over the minute): the watcher then
        # already says the limit is reached, the countdown's end.
        rows = first_look.result()
        assert rows[-1]["limit"] == "max_uptime", rows[-3:]
        if rows[-1]["stopped_at"] is None:
            assert 0 <= rows[-1]["seconds_left"] <= UPTIME_MINUTES * 60, rows[-1]
        else:
            assert rows[-1]["reason"] == f"max uptime {UPTIME_MINUTES:g} min reached", rows[-1]
        assert until(lambda: job_status(idle, busy) == "RUNNING", timeout=60)
        seen = watched(idle, since=time.time())   # a poll that can have seen the job running
        assert seen[-1]["idle_seconds"] is None and seen[-1]["limit"] is None, (
            f"the job was submitted {submitted_after} s after `up` ended "
            f"(idle limit {IDLE_LIMIT_S:g} s)", seen[-3:])

        # The idle cluster lives through its job (which succeeds), then stops within the idle
        # limit and a few polls; the other stops at its uptime, its job still running.
        assert until(lambda: job_status(idle, busy) in ("SUCCEEDED", "FAILED", "STOPPED"),
                     timeout=BUSY_FOR_S + 60)
        assert job_status(idle, busy) == "SUCCEEDED"
        assert len(idle_machine.ray_pids("raylet")) == 2, "stopped while a job was running"

        def stopped() -> bool:
            return not idle_machine.ray_pids() and not uptime_machine.ray_pids()
        assert until(stopped, timeout=IDLE_LIMIT_S + 90, interval=1), (
            idle_machine.ray_processes(), uptime_machine.ray_processes())

        # `status` says why, read from the head's watcher (Ray no longer answers).
        # (the watcher writes why once the takedown is over: asked until it has)
        for handle, reason in ((idle, f"idle for {IDLE_MINUTES:g} min"),
                               (uptime, f"max uptime {UPTIME_MINUTES:g} min reached")):
            assert until(lambda h=handle: status_of(h)["autostop"].get("stopped_at") is not None,
                         timeout=60), status_of(handle)
            row = status_of(handle)
            assert row["live"]["reachable"] is False
            assert row["autostop"]["reason"] == reason, row["autostop"]
            assert row["autostop"]["stopped_at"] is not None
            assert (row["state"], row["recorded_state"]) == ("stopped", "up"), row
            text = handle.cli("status", handle.name)
            assert f"stopped: {reason}" in text.stdout, text.stdout
            [line] = [ln for ln in text.stdout.splitlines() if ln.startswith(handle.name)]
            assert line.split()[2] == "stopped", text.stdout   # NAME PROVIDER STATE ...
        assert forever

        # The logs were archived before the takedown, where the file said; `logs` reads them
        # there now that no Ray answers, and the archive says why it was made.
        [kept] = (shared / idle.name).iterdir()
        assert json.loads((kept / "stopped.json").read_text())["reason"] == \
            f"idle for {IDLE_MINUTES:g} min"
        assert busy in {job["submission_id"] for job in
                        json.loads((kept / "jobs.json").read_text())}
        shown = idle.cli("logs", busy, "--cluster", idle.name)   # submitted past orchestrate
        assert shown.returncode == 0 and SAID in shown.stdout, shown.stderr
        # Without `archive:` the archive is in the head's ~/.orchestrate/archive, which `logs`
        # reads over SSH: the host outlives its cluster on-prem.
        shown = uptime.cli("logs", forever, "--cluster", uptime.name)
        assert shown.returncode == 0 and f"{SAID}-uptime" in shown.stdout, shown.stderr
        assert f"cluster {uptime.name} no longer has job {forever} (STOPPED, stopped with that " \
            "Ray)" in shown.stderr, shown.stderr

        # `up` of a cluster that stopped itself brings it back: its record says up, its Ray
        # does not answer, so the plan restarts it (a head alone: the cheaper of the two).
        again = uptime.cli("up", str(uptime.file), "-y", "--format", "json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["plan"]["action"] == "restart"
        assert len(uptime_machine.ray_pids("gcs_server")) == 1
        # A watcher that died is started again by an `up` that changes nothing, and there is
        # never more than one.
        assert until(lambda: uptime_machine.ray_pids("head.autostop"), timeout=30)
        for host in uptime_machine.hosts:
            host.in_host("pkill", "-f", "head.autostop", check=False)
        assert not uptime_machine.ray_pids("head.autostop")
        for _ in range(2):
            same = uptime.cli("up", str(uptime.file), "-y", "--format", "json")
            assert same.returncode == 0, same.stderr
            assert json.loads(same.stdout)["action"] == "unchanged"
        assert until(lambda: len(uptime_machine.ray_pids("head.autostop")) == 1, timeout=30), \
            uptime_machine.ray_processes("autostop")
    finally:
        with ThreadPoolExecutor(2) as pool:   # two clusters on their own hosts: at once
            list(pool.map(tear_down, handles))
        shutil.rmtree(shared, ignore_errors=True)
        print(f"autostop test: {time.monotonic() - started:.0f} s")
