"""A cluster's logs archived before it goes down (`tear_down`, a replace): the head's archiver
(`orchestrator.head.archive`, mounted on `~/.orchestrate/head`) run through the launch
backend's `exec`; a head without it (launched before there was one) is archived from here
through the Job API, into the same layout. When the cluster file names no archive, the head's
own folder is copied here, so it outlives the cluster:

    $ORCHESTRATE_HOME/logs/clusters/<name>/<UTC stamp>-<reason>/   (private)
    $ORCHESTRATE_HOME/logs/clusters/<name>/archives.json           every archive written, newest
                                                                   last: what `logs` reads

    keep_logs(record, config, state, progress, reason="down") -> str   # where they went
    find_job(name, job_id, config) -> Archived | None                 # for `logs` and `runs`
"""
from __future__ import annotations

import json
import re
import shlex
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

from .. import launch
from ..errors import ClusterError
from ..head import archive as head_archive
from ..reach.archive import Archived
from ..reach.endpoint import open_cluster
from ..state import ClusterRecord, State, home
from ..state.folder import is_valid_name
from ..util import http
from ..util.files import atomic_write, private_folder, read_json
from ..util.progress import Progress

NO_ARCHIVER = 97   # the head's exit code when ~/.orchestrate/head/archive.py is not there
SSH_FAILED = 255   # ssh's own exit code: no connection
LOG_TIMEOUT = 10.0
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def local_folder(name: str) -> Path:
    return home() / "logs" / "clusters" / name


def index_path(name: str) -> Path:
    return local_folder(name) / "archives.json"


def remembered(name: str) -> list[str]:
    """The archives written for cluster `name` from this machine, newest first."""
    data, _ = read_json(index_path(name), lambda d: None if isinstance(d, list) else "not a list")
    return [str(uri) for uri in reversed(data or []) if isinstance(uri, str)]


def remember(name: str, uri: str) -> None:
    known = list(reversed(remembered(name)))
    atomic_write(index_path(name), json.dumps([u for u in known if u != uri] + [uri]))


def head_command(reason: str, at: float) -> str:
    """The archiver on the head, with the Python that runs Ray (the `ray` script's own: a
    login shell may put another `python` first)."""
    return (f"test -f ~/.orchestrate/head/archive.py || exit {NO_ARCHIVER}; "
            "PY=$(sed -n '1s/^#!//p' \"$(command -v ray)\" 2>/dev/null); "
            f"cd ~/.orchestrate && exec ${{PY:-python3}} -m head.archive "
            f"--reason {shlex.quote(reason)} --at {at!r} 1>&2")   # stdout stays the verb's


def keep_logs(record: ClusterRecord, config: dict[str, Any], state: State, progress: Progress,
              *, reason: str = "down") -> str:
    """Archive the cluster's jobs and logs; where they are now (a URI or a folder here).
    ClusterError if they could not be."""
    at = time.time()
    target = head_archive.destination(config, reason, at)
    backend = launch.backend(record, state, progress)
    code = backend.exec(record, head_command(reason, at), tty=False)
    if code == NO_ARCHIVER:
        progress("  the head has no archiver (launched before there was one): archiving "
                 "through the Job API")
        target = _from_here(record, config, state, reason, at)
    elif code == SSH_FAILED:
        raise ClusterError(f"the head of {record.name} could not be reached over SSH")
    elif code != 0:
        raise ClusterError(f"the archiver on the head of {record.name} exited {code}")
    elif head_archive.location_of(config) is None:   # the head's folder: copied here
        copy = local_folder(record.name) / head_archive.archive_name(reason, at)
        private_folder(copy)
        remote = f"{head_archive.HEAD_FOLDER}/{config.get('cluster_name', record.name)}/" \
                 f"{copy.name}/"
        backend.rsync(record, down=True, source=remote, target=f"{copy}/")
        _private(copy)
        target = str(copy)
    remember(record.name, target)
    return target


def _from_here(record: ClusterRecord, config: dict[str, Any], state: State, reason: str,
               at: float) -> str:
    with open_cluster(record, state) as endpoint:
        try:
            table = http.get_json(endpoint.address, "/api/jobs/", endpoint.token,
                                  timeout=LOG_TIMEOUT)
        except http.HttpError as exc:
            raise ClusterError(f"Ray's job table could not be read: {exc}") from None
        jobs = [job for job in table if isinstance(job, dict)
                and isinstance(job.get("submission_id"), str)] if isinstance(table, list) else []
        logs: dict[str, str] = {}
        for job in jobs:
            job_id = job["submission_id"]
            try:
                found = http.get_json(endpoint.address,
                                      f"/api/jobs/{urllib.parse.quote(job_id, safe='')}/logs",
                                      endpoint.token, timeout=LOG_TIMEOUT)
            except http.HttpError:
                found = None
            logs[job_id] = str(found.get("logs") or "") if isinstance(found, dict) else ""
    target = head_archive.destination(config, reason, at) \
        if head_archive.location_of(config) else \
        str(local_folder(record.name) / head_archive.archive_name(reason, at))
    with tempfile.TemporaryDirectory(prefix="orchestrate-archive-") as staging:
        head_archive.build(Path(staging), jobs, logs, reason=reason, at=at,
                           details={"cluster": record.name}, session_logs=None)
        head_archive.publish(Path(staging), target)
    return target


def _private(folder: Path) -> None:
    folder.chmod(0o700)
    for path in folder.rglob("*"):
        path.chmod(0o700 if path.is_dir() else 0o600)


def find_job(name: str, job_id: str, config: dict[str, Any] | None) -> Archived | None:
    """Job `job_id` of cluster `name` in its newest archive that has it: those written from
    this machine (`remembered`), then those under the location `config` names (the cluster's
    last rendered config, when the state still has it). An archive in S3 is read with boto3
    here, its job's log copied into this machine's folder for the cluster."""
    if not (_SAFE_ID.fullmatch(job_id) and is_valid_name(name)):
        return None   # a file given for a cluster gone, an id unfit for a file name
    candidates = remembered(name)
    base = head_archive.location_of(config or {})
    if base is not None:
        candidates += [uri for uri in _listed(f"{base.rstrip('/')}/{name}")
                       if uri not in candidates]
    for uri in candidates:
        found = _job_in(uri, name, job_id)
        if found is not None:
            return found
    return None


def _listed(base: str) -> list[str]:
    """The archives under `base` (s3:// or a folder), newest first (their names sort by time)."""
    parsed = urllib.parse.urlparse(base)
    if parsed.scheme == "s3":
        prefix = parsed.path.strip("/") + "/"
        pages = _s3().get_paginator("list_objects_v2").paginate(
            Bucket=parsed.netloc, Prefix=prefix, Delimiter="/")
        names = [p["Prefix"][len(prefix):].strip("/") for page in pages
                 for p in page.get("CommonPrefixes") or []]
        return [f"{base}/{n}" for n in sorted(names, reverse=True)]
    folder = _folder(base)
    names = [p.name for p in folder.iterdir() if p.is_dir()] if folder.is_dir() else []
    return [str(folder / n) for n in sorted(names, reverse=True)]


def _job_in(uri: str, name: str, job_id: str) -> Archived | None:
    parsed = urllib.parse.urlparse(uri)
    try:
        if parsed.scheme == "s3":
            local = local_folder(name) / Path(parsed.path).name
            table = json.loads(_s3_text(parsed.netloc, f"{parsed.path.strip('/')}/jobs.json"))
            job = _entry(table, job_id)
            if job is None:
                return None
            text = _s3_text(parsed.netloc, f"{parsed.path.strip('/')}/jobs/{job_id}.log")
            atomic_write(local / "jobs" / f"{job_id}.log", text)
            log = local / "jobs" / f"{job_id}.log"
        else:
            folder = _folder(uri)
            job = _entry(json.loads((folder / "jobs.json").read_text()), job_id)
            if job is None:
                return None
            log = folder / "jobs" / f"{job_id}.log"
    except (OSError, ValueError, LookupError):
        return None
    except Exception as exc:  # noqa: BLE001 - botocore's: an archive not found, refused
        if type(exc).__module__.startswith("botocore"):
            return None
        raise
    status = str(job.get("status") or "UNKNOWN")
    ended = status in ("SUCCEEDED", "FAILED", "STOPPED")
    return Archived(job_id, status if ended else "STOPPED",
                    str(job.get("message") or "") if ended else
                    f"stopped with cluster {name} while {status}",
                    _number(job.get("start_time")), _number(job.get("end_time")),
                    not ended, kept_at=log, where=f"cluster {name}")


def _entry(table: Any, job_id: str) -> dict[str, Any] | None:
    for job in table if isinstance(table, list) else []:
        if isinstance(job, dict) and job.get("submission_id") == job_id:
            return job
    return None


def _folder(uri: str) -> Path:
    parsed = urllib.parse.urlparse(uri)
    return Path(urllib.parse.unquote(parsed.path) if parsed.scheme == "file" else uri)


def _s3() -> Any:
    import boto3  # the endpoint (AWS_ENDPOINT_URL) and credentials from the environment

    return boto3.client("s3")


def _s3_text(bucket: str, key: str) -> str:
    body = _s3().get_object(Bucket=bucket, Key=key)["Body"].read()
    return bytes(body).decode("utf-8", errors="replace")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
