"""The autostop watcher: on a cluster's head, takes the cluster down when it has been idle, or
up, for as long as its file's `autostop:` says.

    cd ~/.orchestrate && python -m head.autostop      (the head's start commands run it)

Started on every head after `ray start` (it only sleeps while the config has no autostop), one
instance per head (a lock), detached from the shell that started it. Every poll it re-reads the
bootstrap config Ray keeps on the head (`~/ray_bootstrap_config.yaml`: `ray up --no-restart`
syncs it again when the config changed, Ray 2.60's runtime hash covering the whole config), so
adding, changing or removing `autostop:` needs no restart. It writes what it sees to
`~/.orchestrate/autostop.json` (atomically, every poll) and logs to `autostop.log` beside it.

Activity: a Ray job RUNNING or PENDING (the head's job API on its loopback dashboard, with the
token Ray keeps in ~/.ray/auth_token), a Serve application not DELETING (Serve's REST API on the
same dashboard: `orchestrate serve` deploys there, not as a job), or an SSH session with a
terminal on the head (sshd's `user@pts/N` processes; Ray's launcher and orchestrate's forwards use
none) unless `ignore_ssh_sessions`. An answer it cannot get counts as activity: a cluster it
cannot see is never stopped for being idle. The dashboard is asked only once it is proven this
user's Ray (`head.listener`: another user of an on-prem head can bind its port while it is down);
until then nothing is sent, the head counts as busy (never idle on a stranger's word; max uptime
still applies) and the log says so when that starts and ends. Max uptime counts from Ray's start
on the head (its GCS process).

When time is up: the logs are archived (`head.archive.run`, when that module is there); for an
idle stop the head is looked at again (archiving takes minutes), and any activity then abandons
the stop and restarts the idle clock; then the cluster is taken down
(`head.takedown.take_down`) and the watcher ends. A takedown that fails is said in the status
file (`takedown-failed`) and tried again, 1, 2, 4 ... at most 15 minutes apart, whether Ray still
runs on the head or not (the cloud takedown stops it first).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .listener import NotOurs, get_json

FOLDER = Path.home() / ".orchestrate"
STATUS_FILE = FOLDER / "autostop.json"
LOG_FILE = FOLDER / "autostop.log"
LOCK_FILE = FOLDER / "autostop.lock"
UP_FILE = FOLDER / "up-done"      # touched by `orchestrate up` when it has changed the cluster
BOOTSTRAP = Path.home() / "ray_bootstrap_config.yaml"
TOKEN_FILE = Path.home() / ".ray" / "auth_token"
POLL_SECONDS = float(os.environ.get("ORCHESTRATE_AUTOSTOP_POLL_S", "10"))
BUSY_STATES = ("RUNNING", "PENDING")
UP_GRACE_S = 30 * 60.0      # an `up` not finished this long after Ray started: idle counts
RETRY_FIRST_S = 60.0        # a failed takedown is tried again after 1, 2, 4 ... minutes,
RETRY_MAX_S = 15 * 60.0     # at most 15 apart
SERVE_NOT_INSTALLED = 501   # Ray 2.60's Serve API without ray[serve]: no Serve can be running
_SSH_TERMINAL = re.compile(r"^sshd(?:-session)?: \S+@pts/\d+")
_DASHBOARD_PORT = re.compile(r"--dashboard-port(?:=|\s+)(\d+)")
UNSEEN = "cannot tell: "   # the start of an activity that is the dashboard not asked

Log = Callable[[str], None]


@dataclass(frozen=True)
class Settings:
    idle_minutes: float | None = None
    max_uptime_minutes: float | None = None
    ignore_ssh_sessions: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"idle_minutes": self.idle_minutes, "max_uptime_minutes": self.max_uptime_minutes,
                "ignore_ssh_sessions": self.ignore_ssh_sessions}


def settings(config: dict[str, Any]) -> Settings | None:
    """The config's `metadata.orchestrate.autostop` (orchestrator.cluster_settings puts it
    there; not imported: nothing of orchestrate but this folder is on the head)."""
    found = ((config.get("metadata") or {}).get("orchestrate") or {}).get("autostop")
    if not isinstance(found, dict):
        return None
    idle, uptime = found.get("idle_minutes"), found.get("max_uptime_minutes")
    if idle is None and uptime is None:
        return None
    return Settings(float(idle) if idle is not None else None,
                    float(uptime) if uptime is not None else None,
                    bool(found.get("ignore_ssh_sessions", False)))


@dataclass(frozen=True)
class Verdict:
    idle_since: float | None        # None: busy now
    seconds_left: float | None      # before autostop; None: no limit applies
    limit: str | None               # "idle" | "max_uptime": the one that ends first
    reason: str | None              # set when it is time to stop

    @property
    def stop(self) -> bool:
        return self.reason is not None


def _minutes(value: float) -> str:
    return f"{value:g} min"


def decide(rules: Settings, *, now: float, busy: bool, idle_since: float | None,
           started: float) -> Verdict:
    """Pure: what a poll concludes. `idle_since` is the last poll's (None: it was busy, or this
    is the first poll); activity restarts the idle clock; max uptime counts from `started`."""
    idle_since = None if busy else (idle_since if idle_since is not None else now)
    left: dict[str, float] = {}
    if rules.idle_minutes is not None and idle_since is not None:
        left["idle"] = idle_since + rules.idle_minutes * 60 - now
    if rules.max_uptime_minutes is not None:
        left["max_uptime"] = started + rules.max_uptime_minutes * 60 - now
    if not left:
        return Verdict(idle_since, None, None, None)
    limit = min(left, key=lambda name: left[name])
    seconds = max(0.0, left[limit])
    reason = None
    if left[limit] <= 0:
        reason = (f"idle for {_minutes(rules.idle_minutes or 0)}" if limit == "idle"
                  else f"max uptime {_minutes(rules.max_uptime_minutes or 0)} reached")
    return Verdict(idle_since, seconds, limit, reason)


# --- what the head is doing -------------------------------------------------------------------

def ssh_terminals(proc: Path = Path("/proc")) -> int:
    """SSH sessions with a terminal on this host (sshd names its session process
    `sshd: user@pts/N`, or `sshd-session: ...` in OpenSSH 9.8+)."""
    count = 0
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if _SSH_TERMINAL.match(command.strip()):
            count += 1
    return count


def ray_started(proc: Path = Path("/proc")) -> float | None:
    """When Ray started on this host: its GCS server's start time (None: Ray is not running),
    of this user's newest GCS server."""
    try:
        boot = next(float(line.split()[1]) for line in (proc / "stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # this user's Ray only: another user's (a shared on-prem host) is not the cluster's
            if entry.stat().st_uid != os.getuid() \
                    or (entry / "comm").read_text().strip() != "gcs_server":
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            found.append(boot + int(fields[19]) / ticks)   # field 22: starttime
        except (OSError, IndexError, ValueError):
            continue
    # the newest: a Ray left over from before cannot make the cluster's uptime look longer
    return max(found) if found else None


def dashboard_port(config: dict[str, Any]) -> int:
    found = [m.group(1) for command in config.get("head_start_ray_commands") or []
             for m in _DASHBOARD_PORT.finditer(str(command))]
    return int(found[-1]) if found else 8265


def _get(port: int, path: str, timeout: float) -> Any:
    """JSON from the head's dashboard on loopback, with the cluster's token, once it is proven
    this user's Ray (NotOurs if not: nothing sent; OSError, including urllib's HTTPError, or
    ValueError when there is no JSON answer)."""
    token = None
    with contextlib.suppress(OSError):
        token = TOKEN_FILE.read_text().strip() or None
    return get_json(f"http://127.0.0.1:{port}", path, token, timeout)


def busy_jobs(port: int, timeout: float = 10, since: float | None = None) -> int:
    """Ray jobs RUNNING or PENDING, and (with `since`, epoch seconds) jobs that started or
    ended after it: a short job between two polls is activity too. From the head's job API
    (OSError/ValueError if it does not answer)."""
    jobs = _get(port, "/api/jobs/", timeout)
    if not isinstance(jobs, list):
        raise ValueError("the job API answered no list")

    def recent(job: dict[str, Any]) -> bool:
        times = [job.get("start_time"), job.get("end_time")]   # milliseconds
        return since is not None and any(isinstance(t, (int, float)) and not isinstance(t, bool)
                                         and t / 1000 > since for t in times)

    return sum(1 for job in jobs if isinstance(job, dict)
               and (job.get("status") in BUSY_STATES or recent(job)))


def serve_apps(port: int, timeout: float = 10) -> int:
    """Serve applications not DELETING, from Serve's REST API on the head's dashboard. Ray 2.60
    answers `{"applications": {}, ...}` when Serve was never started (no controller), and HTTP
    501 when ray[serve] is not installed: both are no application. Anything else it cannot
    answer raises (OSError/ValueError)."""
    import urllib.error

    try:
        found = _get(port, "/api/serve/applications/", timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == SERVE_NOT_INSTALLED:
            return 0
        raise
    apps = found.get("applications") if isinstance(found, dict) else None
    if not isinstance(apps, dict):
        raise ValueError("Serve's API answered no applications")
    return sum(1 for app in apps.values()
               if not (isinstance(app, dict) and app.get("status") == "DELETING"))


def activity(config: dict[str, Any], rules: Settings, since: float | None = None) -> list[str]:
    """What keeps the head busy now, or did since `since` (a job), said plainly (empty: idle)."""
    port, found = dashboard_port(config), list[str]()
    asks: tuple[tuple[str, str, Callable[[], int]], ...] = (
        ("job(s)", "job API", lambda: busy_jobs(port, since=since)),
        ("Serve application(s)", "Serve API", lambda: serve_apps(port)))
    for what, api, count in asks:
        try:
            number = count()
            if number:
                found.append(f"{number} {what}")
        except NotOurs as exc:
            found.append(f"{UNSEEN}{api} not asked: {exc}")
        except (OSError, ValueError) as exc:
            found.append(f"{api} did not answer ({exc})")
    if not rules.ignore_ssh_sessions:
        terminals = ssh_terminals()
        if terminals:
            found.append(f"{terminals} SSH terminal(s)")
    return found


def up_activity(started: float, *, now: float, since: float | None,
                path: Path | None = None) -> list[str]:
    """The idle clock starts when `orchestrate up` finishes, not when Ray starts: workers
    joining and setup commands are not idleness. `up` touches UP_FILE at its end, after any
    change (never when it changed nothing); a file older than this Ray means an `up` still
    running, for at most UP_GRACE_S (an `up` that failed half-way must not keep a cluster for
    ever). A touch since `since` restarts the idle clock."""
    try:
        done = (path or UP_FILE).stat().st_mtime
    except OSError:
        done = None
    if done is None or done < started - 1:   # /proc's boot time is whole seconds
        return ["`orchestrate up` not finished"] if now - started < UP_GRACE_S else []
    return ["`orchestrate up` ran"] if since is not None and done > since else []


# --- the loop ---------------------------------------------------------------------------------

def write_status(status: dict[str, Any], path: Path | None = None) -> None:
    """Atomically: a reader sees the last whole file, never a half-written one."""
    path = path or STATUS_FILE
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(status, sort_keys=True, indent=1) + "\n")
    os.replace(temporary, path)


def read_config(path: Path | None = None) -> dict[str, Any]:
    """The bootstrap config (Ray writes it as JSON; YAML is read too)."""
    path = path or BOOTSTRAP
    text = path.read_text()
    try:
        loaded = json.loads(text)
    except ValueError:
        import yaml

        loaded = yaml.safe_load(text)
    return loaded if isinstance(loaded, dict) else {}


def _log(message: str) -> None:
    line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n"
    with open(LOG_FILE, "a") as log:
        log.write(line)


def archive_logs(config: dict[str, Any], reason: str, details: dict[str, Any], log: Log) -> None:
    """Archive the logs, when the archiver is there; a failure is said and the stop goes on."""
    import importlib

    try:   # another part of orchestrate; a head without it goes on
        archive = importlib.import_module(".archive", __package__)
    except ImportError:
        return
    try:
        where = archive.run(config, reason, details)
        log(f"logs archived to {where}" if where else "no logs archived")
    except Exception as exc:  # noqa: BLE001 - the cluster goes down all the same
        log(f"archiving the logs failed: {exc}")


def take_down(config: dict[str, Any], reason: str, log: Log) -> tuple[bool, str]:
    """head.takedown.take_down; whether it succeeded, and its last word (the error if not)."""
    from .takedown import take_down as down

    said: list[str] = []

    def keep(message: str) -> None:
        said.append(message)
        log(message)

    try:
        done = down(config, reason, keep)
    except Exception as exc:  # noqa: BLE001 - said, and tried again
        keep(f"the takedown failed: {type(exc).__name__}: {exc}")
        done = False
    return done, (said[-1] if said else "")[:300]


def retry_delay(attempts: int) -> float:
    return min(RETRY_MAX_S, RETRY_FIRST_S * 2.0 ** max(0, attempts - 1))


def attempt_takedown(memory: dict[str, Any], *, now: float, log: Log) -> None:
    """Take the cluster down as `memory["takedown"]` says; on success the watcher is done
    (`memory["ended"]`), else the status says why and when the next attempt is."""
    pending = memory["takedown"]
    reason, status = pending["reason"], pending["status"]
    done, said = take_down(pending["config"], reason, log)
    if done:
        memory["ended"] = True
        write_status({**status, "state": "stopped", "checked_at": now,
                      "stopped": {"reason": reason, "at": time.time()}})
        return
    pending["attempts"] += 1
    pending["next_at"] = now + retry_delay(pending["attempts"])
    pending["error"] = said
    log(f"the takedown failed (attempt {pending['attempts']}); trying again in "
        f"{retry_delay(pending['attempts']) / 60:g} min")
    write_status({**status, "state": "takedown-failed", "checked_at": now, "error": said,
                  "takedown": {"reason": reason, "attempts": pending["attempts"],
                               "next_attempt_at": pending["next_at"]}})


def say_unseen(memory: dict[str, Any], busy: list[str], log: Log) -> None:
    """Log when the dashboard stops being, or is again, proven this user's Ray: a head that
    counts as busy because it cannot be seen is never so silently."""
    unseen = sorted({item.removeprefix(UNSEEN).split(": ", 1)[-1] for item in busy
                     if item.startswith(UNSEEN)})
    if unseen == memory.get("unseen", []):
        return
    if unseen:
        log(f"cannot tell whether the head is idle: {'; '.join(unseen)}; it counts as busy "
            "until the dashboard is proven this user's Ray (max uptime still applies)")
    else:
        log("the dashboard is proven this user's Ray again: idle time counts")
    memory["unseen"] = unseen


def poll_once(memory: dict[str, Any], *, now: float, log: Log) -> Verdict | None:
    """One poll: read the config, look at the head, decide, write the status file. `memory`
    carries idle_since between polls, and a takedown to try again. None: no autostop set, Ray
    is not running, or a failed takedown is waiting for its next attempt."""
    pending = memory.get("takedown")
    if pending and ray_started() is None:   # a takedown stopped Ray here; the rest failed
        if now >= pending["next_at"]:
            attempt_takedown(memory, now=now, log=log)
        return None
    if pending:
        # Ray runs: the failed takedown did not get as far as stopping it, or someone started
        # it again (`up`). Decide afresh (settings, activity, uptime of this Ray), keeping the
        # backoff for when the answer is still to stop.
        del memory["takedown"]
        memory["backoff"] = {k: pending[k] for k in ("attempts", "next_at", "error")
                             if k in pending}
    try:
        config = read_config()
    except (OSError, ValueError) as exc:
        write_status({"state": "no-config", "error": str(exc), "checked_at": now})
        return None
    rules = settings(config)
    if rules is None:
        memory["idle_since"] = None
        memory.pop("backoff", None)
        write_status({"state": "off", "checked_at": now})
        return None
    started = ray_started()
    if started is None:
        memory["idle_since"] = None
        write_status({"state": "ray-stopped", "settings": rules.as_dict(), "checked_at": now})
        return None
    since = memory.get("idle_since")
    busy_now = activity(config, rules, since=since) + up_activity(started, now=now, since=since)
    say_unseen(memory, busy_now, log)
    verdict = decide(rules, now=now, busy=bool(busy_now), idle_since=since, started=started)
    memory["idle_since"] = verdict.idle_since
    status = {"state": "stopping" if verdict.stop else "watching", "settings": rules.as_dict(),
              "checked_at": now, "idle_since": verdict.idle_since, "uptime_start": started,
              "seconds_left": verdict.seconds_left, "limit": verdict.limit,
              "activity": busy_now}
    if not verdict.stop:
        memory.pop("backoff", None)   # a stop no longer wanted: no failure to back off from
    backoff = memory.get("backoff")
    if verdict.stop and backoff and now < backoff["next_at"]:   # a failed takedown's backoff
        write_status({**status, "state": "takedown-failed", "error": backoff.get("error", ""),
                      "takedown": {"reason": verdict.reason, "attempts": backoff["attempts"],
                                   "next_attempt_at": backoff["next_at"]}})
        return verdict
    write_status(status)
    if verdict.stop:
        reason = str(verdict.reason)
        log(f"autostop: {reason}; archiving the logs, then taking the cluster down")
        archive_logs(config, reason, {**status, "reason": reason}, log)
        if verdict.limit == "idle":   # archiving takes minutes: still idle?
            busy_now = activity(config, rules, since=now) + up_activity(started, now=now,
                                                                         since=now)
            if busy_now:
                log(f"autostop abandoned: {', '.join(busy_now)} after archiving; the idle "
                    "clock starts again")
                memory["idle_since"] = None
                write_status({**status, "state": "watching", "idle_since": None,
                              "seconds_left": None, "limit": None, "activity": busy_now})
                return verdict
        memory["takedown"] = {"reason": reason, "config": config, "status": status,
                              "attempts": memory.pop("backoff", {}).get("attempts", 0),
                              "next_at": now}
        attempt_takedown(memory, now=now, log=log)
    return verdict


def main() -> int:
    import fcntl

    FOLDER.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "a") as lock:   # held for the process's life: one watcher per head
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0   # one is running already
        return watch()


def watch() -> int:
    _log(f"watcher started (pid {os.getpid()}, poll {POLL_SECONDS:g} s)")
    memory: dict[str, Any] = {}
    while True:
        try:
            poll_once(memory, now=time.time(), log=_log)
        except Exception as exc:  # noqa: BLE001 - a watcher that dies stops nothing
            _log(f"poll failed: {type(exc).__name__}: {exc}")
        if memory.get("ended"):
            _log("watcher ends: the cluster was taken down")
            return 0
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
