"""The embedded Ray's jobs, kept after it stops: each job's whole log and how it ended.

Ray keeps a job's log in its temp dir, which goes with the embedded Ray (its idle stop, `stop
--embedded`, its last run leaving at ORCHESTRATE_EMBEDDED_RAY_IDLE=0). So before it stops
(`embedded.keep_logs`), and every few seconds while its watchdog runs (jobs ended since, each
once, so a Ray that crashes later loses nothing that ended), the jobs of its table are saved in
$ORCHESTRATE_HOME/logs/, the folder `orchestrate run` follows a job's log into:

    <job_id>.log    the whole log (a followed log with as many lines, written since the job
                    started, is left as it is: it has the job's secrets hidden)
    <job_id>.json   status, message, error_type, start/end times (ms, as Ray gives them),
                    driver_exit_code, metadata; `stopped_with_ray` when the job was PENDING or
                    RUNNING as its Ray stopped (its status is then STOPPED)

`logs` and `runs` read them (`read`) when the Ray does not know the job any more. Light imports
only: this runs inside the watchdog. Every request carries the token after the checks every
request makes (`util.http`: the listener proven ours).

    save(address, token, stopping=...)   # the ids saved now
    read(job_id)                          # Archived, or None
"""
from __future__ import annotations

import json
import re
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import contract
from ..state import home
from ..util import http
from ..util.files import atomic_write, private_folder, read_below, read_json

ENDED = ("SUCCEEDED", "FAILED", "STOPPED")   # Ray's terminal job states
REQUEST_TIMEOUT = 5.0    # a stop must not wait long on a dashboard that does not answer
BUDGET = 20.0            # seconds for one save, after which the rest is left (a stop waits)
# Seconds after a job's end before the watchdog saves it: `orchestrate run`'s follower reads
# the end of the log (2-4 s after the job's end) and writes its own, secrets hidden, meanwhile.
GRACE = 30.0
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def folder() -> Path:
    return home() / "logs"


def log_path(job_id: str) -> Path:
    return folder() / f"{job_id}.log"


def record_path(job_id: str) -> Path:
    return folder() / f"{job_id}.json"


@dataclass(frozen=True)
class Archived:
    job_id: str
    status: str
    message: str
    start_time: float | None   # ms since the epoch, as Ray gives it
    end_time: float | None
    stopped_with_ray: bool
    kept_at: Path | None = None   # a cluster's archive (cluster.archive); None: this folder's
    where: str = "the embedded Ray"   # for messages: what the job ran on
    below: Path | None = None   # no link followed below it (an archive); None: the log's folder

    @property
    def log_path(self) -> Path:
        return self.kept_at or log_path(self.job_id)

    def log(self) -> str:
        """The log ("" if it cannot be read): a regular file, never a link's target (an
        archive copied from a head may hold links to this machine's files)."""
        try:
            return read_below(self.below or self.log_path.parent,
                              self.log_path).decode(errors="replace")
        except OSError:
            return ""

    def reason(self) -> str | None:
        """Why it did not succeed (None if it did): the job's own error, as its result line
        says (what `run.experiment.outcome` reports), else Ray's message's first line."""
        if self.status == "SUCCEEDED":
            return None
        if self.stopped_with_ray:
            return self.message
        error = (contract.parse_result(self.log()) or {}).get("error")
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return str(error or first or f"the job ended {self.status}")


def read(job_id: str) -> Archived | None:
    """The job as saved here, None if it was not (or its record is damaged)."""
    if not _SAFE_ID.fullmatch(job_id):
        return None
    data, _ = read_json(record_path(job_id), _problem)
    if data is None:
        return None
    return Archived(job_id, data["status"], str(data.get("message") or ""),
                    _number(data.get("start_time")), _number(data.get("end_time")),
                    bool(data.get("stopped_with_ray")))


def _problem(data: Any) -> str | None:
    if not isinstance(data, dict) or not isinstance(data.get("status"), str):
        return "not a job's record"
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def save(address: str, token: str | None, *, stopping: bool,
         now: float | None = None, budget: float = BUDGET) -> list[str]:
    """Save the jobs of the Ray at `address` not saved yet in their final form: those ended
    (GRACE seconds ago, unless `stopping`), and when `stopping` those still PENDING or RUNNING
    too, as stopped with their Ray. The ids saved; HttpError if the job table cannot be read."""
    now = time.time() if now is None else now
    deadline = time.monotonic() + budget
    jobs = http.get_json(address, "/api/jobs/", token, timeout=REQUEST_TIMEOUT)
    saved: list[str] = []
    for job in jobs if isinstance(jobs, list) else []:
        if time.monotonic() > deadline:
            print(f"note: {len(saved)} job log(s) kept; no time left for the others",
                  file=sys.stderr, flush=True)
            break
        if not (isinstance(job, dict) and _due(job, stopping, now)) or _saved(job):
            continue
        job_id = job["submission_id"]
        found = http.get_json(address, f"/api/jobs/{urllib.parse.quote(job_id, safe='')}/logs",
                              token, timeout=REQUEST_TIMEOUT)
        logs = found.get("logs") if isinstance(found, dict) else None
        _write(job, logs if isinstance(logs, str) else "", now)
        saved.append(job_id)
    return saved


def _due(job: dict[str, Any], stopping: bool, now: float) -> bool:
    job_id = job.get("submission_id")
    if not isinstance(job_id, str) or not _SAFE_ID.fullmatch(job_id):
        return False   # a driver's own job (no submission), or an id unfit for a file name
    if job.get("status") not in ENDED:
        return stopping
    end = _number(job.get("end_time"))
    return stopping or end is None or now - end / 1000 >= GRACE


def _saved(job: dict[str, Any]) -> bool:
    """Whether this very job (not an earlier one of the same id, on an earlier Ray) has been
    saved once ended."""
    known = read(job["submission_id"])
    return (known is not None and job.get("status") in ENDED and known.status in ENDED
            and not known.stopped_with_ray
            and known.start_time == _number(job.get("start_time")))


def _write(job: dict[str, Any], logs: str, now: float) -> None:
    job_id = job["submission_id"]
    private_folder(folder())
    start = _number(job.get("start_time"))
    if not _kept_as_followed(log_path(job_id), logs, start):
        atomic_write(log_path(job_id), logs)
    status = job.get("status")
    stopped = status not in ENDED
    record = {
        "job_id": job_id,
        "status": "STOPPED" if stopped else status,
        "message": f"stopped with the embedded Ray while {status}" if stopped
        else job.get("message"),
        "error_type": job.get("error_type"),
        "start_time": start,
        "end_time": now * 1000 if stopped else _number(job.get("end_time")),
        "driver_exit_code": job.get("driver_exit_code"),
        "metadata": job.get("metadata"),
        "stopped_with_ray": stopped,
        "saved_at": now,
    }
    atomic_write(record_path(job_id), json.dumps(record, default=str))


def _kept_as_followed(path: Path, logs: str, start: float | None) -> bool:
    """Whether the log at `path` is this job's (written since it started) and whole (as many
    lines as Ray's): `orchestrate run` wrote it as it followed the job, secrets hidden."""
    try:
        written = path.stat().st_mtime
        with path.open("rb") as existing:
            lines = sum(1 for _ in existing)
    except OSError:
        return False
    return (start is not None and written >= start / 1000
            and lines >= len(logs.splitlines()))
