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
token Ray keeps in ~/.ray/auth_token), or an SSH session with a terminal on the head (sshd's
`user@pts/N` processes; Ray's launcher and orchestrate's forwards use none) unless
`ignore_ssh_sessions`. An answer it cannot get counts as activity: a cluster it cannot see is
never stopped for being idle. Max uptime counts from Ray's start on the head (its GCS process).

When time is up: the logs are archived (`head.archive.run`, when that module is there), then
the cluster is taken down (`head.takedown.take_down`), and the watcher ends.
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

FOLDER = Path.home() / ".orchestrate"
STATUS_FILE = FOLDER / "autostop.json"
LOG_FILE = FOLDER / "autostop.log"
LOCK_FILE = FOLDER / "autostop.lock"
BOOTSTRAP = Path.home() / "ray_bootstrap_config.yaml"
TOKEN_FILE = Path.home() / ".ray" / "auth_token"
POLL_SECONDS = float(os.environ.get("ORCHESTRATE_AUTOSTOP_POLL_S", "10"))
BUSY_STATES = ("RUNNING", "PENDING")
_SSH_TERMINAL = re.compile(r"^sshd(?:-session)?: \S+@pts/\d+")
_DASHBOARD_PORT = re.compile(r"--dashboard-port(?:=|\s+)(\d+)")

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
    """When Ray started on this host: its GCS server's start time (None: Ray is not running)."""
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
            if (entry / "comm").read_text().strip() != "gcs_server":
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            found.append(boot + int(fields[19]) / ticks)   # field 22: starttime
        except (OSError, IndexError, ValueError):
            continue
    return min(found) if found else None


def dashboard_port(config: dict[str, Any]) -> int:
    found = [m.group(1) for command in config.get("head_start_ray_commands") or []
             for m in _DASHBOARD_PORT.finditer(str(command))]
    return int(found[-1]) if found else 8265


def busy_jobs(port: int, timeout: float = 10) -> int:
    """Ray jobs RUNNING or PENDING, from the head's job API (OSError/ValueError if it does not
    answer)."""
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/jobs/")
    with contextlib.suppress(OSError):
        token = TOKEN_FILE.read_text().strip()
        if token:
            request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - loopback
        jobs = json.loads(answer.read())
    return sum(1 for job in jobs if isinstance(job, dict) and job.get("status") in BUSY_STATES)


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


def stop_cluster(config: dict[str, Any], reason: str, details: dict[str, Any], log: Log) -> None:
    """Archive the logs (when the archiver is there), then take the cluster down."""
    import importlib

    try:   # another part of orchestrate; a head without it goes on
        archive = importlib.import_module(".archive", __package__)
    except ImportError:
        archive = None
    if archive is not None:
        try:
            where = archive.run(config, reason, details)
            log(f"logs archived to {where}" if where else "no logs archived")
        except Exception as exc:  # noqa: BLE001 - the cluster goes down all the same
            log(f"archiving the logs failed: {exc}")
    from .takedown import take_down

    take_down(config, reason, log)


def poll_once(memory: dict[str, Any], *, now: float, log: Log) -> Verdict | None:
    """One poll: read the config, look at the head, decide, write the status file. `memory`
    carries idle_since between polls. None: no autostop set, or Ray is not running."""
    try:
        config = read_config()
    except (OSError, ValueError) as exc:
        write_status({"state": "no-config", "error": str(exc), "checked_at": now})
        return None
    rules = settings(config)
    if rules is None:
        memory["idle_since"] = None
        write_status({"state": "off", "checked_at": now})
        return None
    started = ray_started()
    if started is None:
        memory["idle_since"] = None
        write_status({"state": "ray-stopped", "settings": rules.as_dict(), "checked_at": now})
        return None
    busy, activity = False, list[str]()
    try:
        jobs = busy_jobs(dashboard_port(config))
        if jobs:
            busy, activity = True, activity + [f"{jobs} job(s)"]
    except (OSError, ValueError) as exc:
        busy, activity = True, activity + [f"job API did not answer ({exc})"]
    if not rules.ignore_ssh_sessions:
        terminals = ssh_terminals()
        if terminals:
            busy, activity = True, activity + [f"{terminals} SSH terminal(s)"]
    verdict = decide(rules, now=now, busy=busy, idle_since=memory.get("idle_since"),
                     started=started)
    memory["idle_since"] = verdict.idle_since
    status = {"state": "stopping" if verdict.stop else "watching", "settings": rules.as_dict(),
              "checked_at": now, "idle_since": verdict.idle_since, "uptime_start": started,
              "seconds_left": verdict.seconds_left, "limit": verdict.limit,
              "activity": activity}
    write_status(status)
    if verdict.stop:
        reason = str(verdict.reason)
        log(f"autostop: {reason}; taking the cluster down")
        try:
            stop_cluster(config, reason, {**status, "reason": reason}, log)
        finally:
            write_status({**status, "state": "stopped",
                          "stopped": {"reason": reason, "at": time.time()}})
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
            verdict = poll_once(memory, now=time.time(), log=_log)
        except Exception as exc:  # noqa: BLE001 - a watcher that dies stops nothing
            _log(f"poll failed: {type(exc).__name__}: {exc}")
            verdict = None
        if verdict is not None and verdict.stop:
            _log("watcher ends: the cluster was taken down")
            return 0
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
