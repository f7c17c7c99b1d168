"""How long the embedded Ray stays up with nothing to do: one setting, its watchdog process, and
the line `orchestrate status` prints about it.

ORCHESTRATE_EMBEDDED_RAY_IDLE (before 0.3: ORCHESTRATE_LOCAL_RAY_IDLE, still read), a duration:
`10m` (the default), `90s`, `1h`, or a plain number of minutes. After a run the embedded Ray
stays up ("warm"), so the next `run`, `predict` or `serve` skips its ~10 s start; a watchdog
(`reach.watchdog`, one per Ray) stops it once it has been idle that long: no session in `users/`
(a run being followed, `dashboard`, `predict`, `serve` while the command runs), no job pending
or running, no Serve application deployed. `0`: no watchdog, the last session to leave stops it
unless a detached job asked to keep it (orchestrate 0.2.0's behaviour).

    limit()                      # seconds (0: off); OrchestrateError for a bad value
    spawn(ray_pid, folder)       # the watchdog's pid
    describe(report, now)        # the status line of `watchdog.report`'s dict
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..contract import MLFLOW_CREDENTIALS
from ..errors import OrchestrateError, require

VARIABLE = "ORCHESTRATE_EMBEDDED_RAY_IDLE"
OLD_VARIABLE = "ORCHESTRATE_LOCAL_RAY_IDLE"   # its name before 0.3: still read, never shown
DEFAULT = "10m"
WATCHDOG = "orchestrator.reach.watchdog"
_UNITS = {"s": 1, "m": 60, "h": 3600, "": 60}   # a plain number: minutes
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smh]?)")


def parse_duration(text: str) -> float:
    """Seconds in `10m`, `90s`, `1h`, `1.5h` or `10` (minutes); ValueError for anything else."""
    found = _DURATION.fullmatch(text.strip().lower())
    if not found:
        raise ValueError(text)
    return float(found.group(1)) * _UNITS[found.group(2)]


def limit(environ: Mapping[str, str] = os.environ) -> float:
    """The idle limit in force, in seconds; 0: the last session stops the embedded Ray."""
    name = VARIABLE if environ.get(VARIABLE, "").strip() or OLD_VARIABLE not in environ \
        else OLD_VARIABLE
    text = environ.get(name, "").strip() or DEFAULT
    try:
        return parse_duration(text)
    except ValueError:
        raise OrchestrateError(
            f"{name}={text!r} is not a duration",
            hint=f"how long an idle embedded Ray stays up: e.g. {VARIABLE}=10m (or 90s, 1h, "
                 f"a number of minutes); 0 stops it when its last run ends") from None


def check_interval(seconds: float) -> float:
    """How often the watchdog looks: every 5 s, more often for a short limit."""
    return min(5.0, seconds / 4) if seconds > 0 else 5.0


def command(ray_pid: int) -> list[str]:
    """The watchdog's command line: it names the Ray's pid, never its temp dir (`stop` kills
    whatever names that, and the watchdog calls `stop`)."""
    return [sys.executable, "-m", WATCHDOG, str(ray_pid)]


def spawn(ray_pid: int, folder: Path) -> int:
    """Start the watchdog of the Ray `ray_pid`, detached (a session of its own, no terminal),
    its output in `folder` (the Ray's private one); returns its pid."""
    import orchestrator

    # what it needs: the state folder; not the credentials this command was given for its job
    env = {k: v for k, v in os.environ.items() if k not in MLFLOW_CREDENTIALS}
    env["ORCHESTRATE_HOME"] = str(_absolute_home())
    # found from any folder, even when orchestrate runs from a checkout that is not installed
    source = str(Path(orchestrator.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)
    with open(folder / "watchdog.log", "ab") as log:
        process = subprocess.Popen(command(ray_pid), stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, cwd="/", env=env,
                                   start_new_session=True)
    return process.pid


def _absolute_home() -> Path:
    from ..state import home

    return home().resolve()


def is_watchdog(pid: int, ray_pid: int) -> bool:
    """Whether `pid` is the running watchdog of the Ray `ray_pid`."""
    if not pid or pid == os.getpid():
        return False
    require("psutil", "psutil", "ray")
    import psutil

    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and \
            process.cmdline()[1:] == command(ray_pid)[1:]
    except psutil.Error:
        return False


def end(pid: int, ray_pid: int) -> None:
    """Stop the watchdog of the Ray `ray_pid` (it holds no lock while it sleeps)."""
    if is_watchdog(pid, ray_pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def span(seconds: float) -> str:
    """45s, 2m 5s, 1h 3m."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m" + (f" {seconds % 60}s" if seconds % 60 else "")
    return f"{seconds // 3600}h" + (f" {seconds % 3600 // 60}m" if seconds % 3600 // 60 else "")


def _what(report: Mapping[str, Any]) -> str:
    parts = []
    for key, one, many in (("jobs", "job running", "jobs running"),
                           ("services", "service", "services"),
                           ("sessions", "session", "sessions")):
        count = report.get(key) or 0
        if count:
            parts.append(f"{count} {one if count == 1 else many}")
    return ", ".join(parts)


def describe(report: Mapping[str, Any], now: float | None = None) -> str:
    """One line for `orchestrate status`: where the embedded Ray is, whether it is in use, and
    when it will stop."""
    now = time.time() if now is None else now
    head = (f"the embedded Ray: {report['address']}, pid {report['pid']}, "
            f"{report['num_cpus']} CPUs; ")
    limit_s = report.get("idle_limit") or 0
    if report.get("busy") is None:
        use = "in use? (its dashboard did not answer)"
    elif report["busy"]:
        use = f"busy ({_what(report)})"
    elif report.get("idle_since") is not None:
        use = f"idle for {span(now - report['idle_since'])}"
    else:
        use = "idle"
    if limit_s <= 0:
        end_ = ("kept until `orchestrate stop --embedded`" if report.get("keep")
                else "stops when its last run ends")
    elif not report.get("watchdog"):
        end_ = "its watchdog is not running: `orchestrate stop --embedded` stops it"
    elif report.get("busy") is False and report.get("stops_at") is not None:
        stops = report["stops_at"]
        end_ = (f"stops at {time.strftime('%H:%M:%S', time.localtime(stops))} "
                f"(in {span(stops - now)}) unless used")
    else:
        end_ = f"stops once idle for {span(limit_s)}"
    return f"{head}{use}; {end_}"
