"""The embedded Ray's watchdog: `python -m orchestrator.reach.watchdog PID`, one per Ray
(`reach.idle.spawn`, started by the session that starts or first warms it), detached, its
output in the Ray's private folder.

Every few seconds (`idle.check_interval`) it reads the record. The Ray is in use while a
session is registered in `users/`, a job in Ray's job table is PENDING or RUNNING, or a Serve
application is deployed; a dashboard that does not answer counts as in use too. Once it has
been idle for the record's limit, the watchdog takes the lock, looks again, stops the Ray and
removes its record and token (after keeping its jobs' logs, `reach.archive`; at every look
it keeps those of the jobs that ended since). It exits when the record no longer names its Ray (stopped by
hand, replaced), and when its Ray has died: then it clears what is left first. Its command line
names the Ray's pid, never its temp dir, so the `kill_naming` of `embedded.stop` spares it.

    usage(ray, secrets)     # who uses it now (the requests carry the token only after the
                            # checks every request makes: listeners.vouch + check)
    report(secrets)         # what `orchestrate status` shows; None when none is up
"""
from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

from ..errors import OrchestrateError
from ..state import SecretStore, State
from ..util import http
from . import embedded, idle

NOT_DONE = ("PENDING", "RUNNING")   # Ray's job states that are not terminal
STATUS_TIMEOUT = 3.0   # `status` must not hang on a dashboard that does not answer


@dataclass(frozen=True)
class Usage:
    sessions: int
    jobs: int | None       # None: the dashboard did not answer (or was not asked)
    services: int | None

    @property
    def busy(self) -> bool | None:
        """True in use; False idle; None: cannot tell (its dashboard did not answer)."""
        if self.sessions:
            return True
        if self.jobs is None or self.services is None:
            return None
        return bool(self.jobs or self.services)


def usage(ray: embedded.EmbeddedRay, secrets: SecretStore, *, timeout: float = 10.0) -> Usage:
    """Who uses `ray` now. Its dashboard is asked even while a session is live: Ray's first
    answer about Serve takes ~2 s (the dashboard connects to the cluster), and `status`, with
    its short timeout, should find that done."""
    sessions = len(embedded.live_users(prune=False))
    try:
        endpoint = ray.endpoint(secrets)
        jobs = http.get_json(endpoint.address, "/api/jobs/", endpoint.token, timeout=timeout)
    except (http.HttpError, OrchestrateError):
        return Usage(sessions, None, None)
    running = sum(1 for job in jobs if isinstance(job, dict) and job.get("status") in NOT_DONE) \
        if isinstance(jobs, list) else None
    try:
        served = http.get_json(endpoint.address, "/api/serve/applications/", endpoint.token,
                               timeout=timeout)
        services = len(served.get("applications") or {}) if isinstance(served, dict) else None
    except http.HttpError as exc:
        services = 0 if exc.status == 501 else None   # 501: Serve is not installed
    return Usage(sessions, running, services)


def report(secrets: SecretStore) -> dict[str, Any] | None:
    """The embedded Ray as `orchestrate status` shows it (no lock, short requests); None when
    none runs. `idle_since`, `stops_at`: epoch seconds (None while it is in use)."""
    ray = embedded.recorded()
    if ray is None or not embedded.running(ray):
        return None
    use = usage(ray, secrets, timeout=STATUS_TIMEOUT)
    idle_since = ray.last_used if use.busy is False else None
    return {
        "address": ray.address, "pid": ray.pid, "num_cpus": ray.num_cpus,
        "busy": use.busy, "sessions": use.sessions, "jobs": use.jobs, "services": use.services,
        "idle_limit": ray.idle_limit, "keep": ray.keep,
        "idle_since": idle_since,
        "stops_at": idle_since + ray.idle_limit
        if idle_since is not None and ray.idle_limit > 0 else None,
        "watchdog": idle.is_watchdog(ray.watchdog, ray.pid),
    }


def _idle_long_enough(ray: embedded.EmbeddedRay, secrets: SecretStore) -> bool:
    return (ray.idle_limit > 0 and ray.last_used is not None
            and time.time() - ray.last_used >= ray.idle_limit
            and usage(ray, secrets).busy is False)


def _dead(ray: embedded.EmbeddedRay) -> bool:
    return not embedded.running(ray)


@dataclass
class _Watch:
    pid: int          # the Ray's
    secrets: SecretStore
    busy: bool = False   # at the last look
    limit: float = 0.0   # the record's, at the last look


def _look(w: _Watch) -> bool:
    """One look at the Ray; True when the watchdog is done."""
    if not embedded.record_path().is_file():
        return True   # stopped by hand (its folder may be gone too: create nothing)
    ray = embedded.recorded()
    if ray is None or ray.pid != w.pid:
        return True
    w.limit = ray.idle_limit
    if _dead(ray):
        print(f"{embedded.LABEL} (pid {w.pid}) died; clearing what is left", flush=True)
        return embedded.stop_if(w.pid, _dead, w.secrets)
    embedded.keep_logs(ray, w.secrets, stopping=False)   # what ended since: lost in no crash
    if ray.idle_limit <= 0:
        return False   # kept (a session with the limit at 0 left last)
    was_busy, w.busy = w.busy, usage(ray, w.secrets).busy is not False
    if w.busy:
        return False
    if was_busy or ray.last_used is None:
        return not embedded.mark_used(w.pid, w.secrets)   # idle from now
    if time.time() - ray.last_used < ray.idle_limit:
        return False
    if embedded.stop_if(w.pid, lambda r: _idle_long_enough(r, w.secrets), w.secrets):
        print(f"stopped {embedded.LABEL} (pid {w.pid}): idle for {idle.span(ray.idle_limit)}",
              flush=True)
        return True
    return False


def watch(pid: int) -> int:
    """Watch the Ray `pid` until it is stopped, by us or anyone."""
    w = _Watch(pid, State.here().secrets)
    while True:
        try:
            if _look(w):
                return 0
        except Exception:   # noqa: BLE001 - a daemon: say it, look again later
            traceback.print_exc()
            sys.stdout.flush()
        time.sleep(idle.check_interval(w.limit))


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m orchestrator.reach.watchdog PID", file=sys.stderr)
        return 2
    return watch(int(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
