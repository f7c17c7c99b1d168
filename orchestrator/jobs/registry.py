"""What this machine submitted: `$ORCHESTRATE_HOME/jobs/<id>.json` (where each job went, so
`orchestrate logs JOB` needs no --cluster) and `runs/<run name>.json` (the last results of a run,
for `orchestrate results RUN`)."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

from ..cluster.state import atomic_write, home


def _path(kind: str, key: str) -> Path:
    return home() / kind / (re.sub(r"[^A-Za-z0-9._-]", "_", key) + ".json")


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def record_job(job_id: str, *, cluster: str | None, experiment: str, name: str) -> None:
    atomic_write(_path("jobs", job_id), json.dumps(
        {"job_id": job_id, "cluster": cluster, "experiment": experiment, "name": name,
         "submitted_at": time.time()}))


def job(job_id: str) -> dict | None:
    return _read(_path("jobs", job_id))


def record_run(key: str | None, summary: dict, job_id: str) -> None:
    if key:
        atomic_write(_path("runs", key), json.dumps(dict(summary, job_id=job_id), default=str))


def run(name: str) -> dict | None:
    return _read(_path("runs", name))
