"""A cluster's logs archived before it goes down (`tear_down`, a replace): the head's archiver
(`orchestrator.head.archive`, mounted on `~/.orchestrate/head`) run through the launch
backend's `exec`; a head without it (launched before there was one) is archived from here
through the Job API, into the same layout. When the cluster file names no archive, the head's
own folder is copied here, so it outlives the cluster:

    $ORCHESTRATE_HOME/logs/clusters/<name>/<UTC stamp>-<reason>/   (private)
    $ORCHESTRATE_HOME/logs/clusters/<name>/archives.json           every archive written, newest
                                                                   last: what `logs` reads

An archive is data from the cluster's side: only its plain files and folders are kept or read.
A copy from the head loses its symbolic links and special files (`rsync -a` keeps links as
links, and Ray's `rsync-down` takes no other option); no link is followed when an archive is
read, and this machine's archive folders are written into only when they are its user's own.

    keep_logs(record, config, state, progress, reason="down") -> str   # where they went
    find_job(name, job_id, config) -> Archived | None                 # for `logs` and `runs`
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from .. import launch
from ..errors import ClusterError
from ..head import archive as head_archive
from ..reach.archive import Archived
from ..reach.endpoint import open_cluster
from ..state import ClusterRecord, State, home
from ..state.folder import is_valid_name, private_home
from ..util import http
from ..util.files import Refused, atomic_write, open_below, private_below, read_below, read_json
from ..util.progress import Progress

NO_ARCHIVER = 97   # the head's exit code when ~/.orchestrate/head/archive.py is not there
SSH_FAILED = 255   # ssh's own exit code: no connection
LOG_TIMEOUT = 10.0
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_T = TypeVar("_T")


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
    if launch.Feature.SHELL_ON_HEAD not in backend.FEATURES:   # no orchestrate tools there
        progress("  archiving through the Job API")
        target = _from_here(record, config, state, reason, at)
        remember(record.name, target)
        return target
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
        copy = _writable(local_folder(record.name) / head_archive.archive_name(reason, at))
        remote = f"{head_archive.HEAD_FOLDER}/{config.get('cluster_name', record.name)}/" \
                 f"{copy.name}/"
        backend.rsync(record, down=True, source=remote, target=f"{copy}/")
        removed = _private(copy)
        if removed:
            progress(f"  removed {removed} symbolic link(s) or special file(s) from the copy of "
                     f"the head's archive, never following them: an archive holds only files "
                     f"and folders, and a link could point at any file of this machine")
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
        str(_writable(local_folder(record.name) / head_archive.archive_name(reason, at)))
    with tempfile.TemporaryDirectory(prefix="orchestrate-archive-") as staging:
        head_archive.build(Path(staging), jobs, logs, reason=reason, at=at,
                           details={"cluster": record.name}, session_logs=None)
        head_archive.publish(Path(staging), target)
    return target


def _private(folder: Path) -> int:
    """`folder`, as rsync brought it from the head, made private (folders 0700, files 0600)
    and anything else in it (a symbolic link, a FIFO) removed, never followed: what rsync
    brings is the head's choice. How many were removed."""
    if not os.path.isdir(folder) or os.path.islink(folder):
        raise ClusterError(f"the copy of the head's archive, {folder}, is not a folder",
                           hint=_COPIES_HINT)
    os.chmod(folder, 0o700)   # first: the head's mode for it may not let us list it
    removed = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                removed += _private(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):   # lstat: a regular file, not a link
                os.chmod(entry.path, 0o600)
            else:
                os.unlink(entry.path)
                removed += 1
    return removed


_COPIES_HINT = ("this machine's copies of archives ($ORCHESTRATE_HOME/logs/clusters) are "
                "folders of your own that only you may write; remove the one named, after "
                "looking at who made it, and run the command again")
_LINKS_HINT = ("an archive holds only files and folders, and orchestrate follows no link in "
               "one (it could point at any file of yours); remove what is named, after looking "
               "at who put it there, and run the command again")


def _writable(folder: Path) -> Path:
    """`folder` under this machine's home, private (`private_below`); ClusterError, saying
    which folder and why, if one on the way is a link or not this user's alone."""
    try:
        return private_below(private_home(), folder)
    except Refused as exc:
        raise ClusterError(f"nothing was written into {folder}: {exc}",
                           hint=_COPIES_HINT) from None


def _keep_here(path: Path, text: str) -> Path:
    """A job's log read from an archive elsewhere, written at `path` in this machine's copy."""
    _writable(path.parent)
    atomic_write(path, text)
    return path


def find_job(name: str, job_id: str, config: dict[str, Any] | None,
             state: State | None = None) -> Archived | None:
    """Job `job_id` of cluster `name` in its newest archive that has it: those written from
    this machine (`remembered`), then those under the location `config` names (the cluster's
    last rendered config, when the state still has it), then, for a cluster on hosts that
    outlive it (on-prem) still recorded in `state` with no `archive:`, the head's own folder
    over SSH. An archive in S3 is read with boto3 here, its job's log copied into this
    machine's folder for the cluster. ClusterError when an archive cannot be read (S3 not
    reached, no credentials, access denied, boto3 not installed), with what to do."""
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
    if base is None and state is not None:
        return _on_head(name, job_id, config, state)
    return None


def last_stop(name: str, config: dict[str, Any], since: float) -> dict[str, Any] | None:
    """Why the cluster last stopped, from its newest archive at the location `config` names
    (`stopped.json`: reason and time) when it was written at or after `since` (the cluster's
    last `up`): what a cloud head's watcher said before it took its own machine down. None when
    there is no such archive; ClusterError when the archive cannot be read."""
    base = head_archive.location_of(config)
    if base is None or not is_valid_name(name):
        return None
    for uri in _listed(f"{base.rstrip('/')}/{name}")[:1]:
        parsed = urllib.parse.urlparse(uri)
        try:
            text = (_s3_text(uri, parsed.netloc, f"{parsed.path.strip('/')}/stopped.json")
                    if parsed.scheme == "s3" else
                    read_below(_folder(uri), _folder(uri) / "stopped.json"))
            stopped = json.loads(text) if text else None
        except (OSError, ValueError, Refused):
            return None
        at = _number((stopped or {}).get("at")) if isinstance(stopped, dict) else None
        if stopped and at is not None and at >= since:
            return {"reason": str(stopped.get("reason") or ""), "at": at, "archive": uri}
    return None


_LOG_FOLLOWS = "--- orchestrate: the job's log follows ---"


def _on_head(name: str, job_id: str, config: dict[str, Any] | None,
             state: State) -> Archived | None:
    """The head's own archive folder (a file without `archive:`) of a cluster on hosts that
    outlive it, still recorded: one SSH command prints the newest archive that has the job's
    log, its job table and the log, copied into this machine's folder for the cluster."""
    from .. import providers

    record = state.store.read_cluster(name)
    if record is None or not record.head_ip or not providers.get(record.provider).FIXED_HOSTS:
        return None
    cluster = str((config or {}).get("cluster_name") or name)
    folder = head_archive.HEAD_FOLDER.removeprefix("~/")
    log = shlex.quote(f"jobs/{job_id}.log")
    command = (f'cd "$HOME"/{shlex.quote(f"{folder}/{cluster}")} 2>/dev/null || exit 0; '
               f'for d in $(ls -1r); do if [ -f "$d"/{log} ]; then '
               f'printf "%s\\n" "$d"; cat "$d"/jobs.json; '
               f'printf "\\n%s\\n" {shlex.quote(_LOG_FOLLOWS)}; cat "$d"/{log}; exit 0; fi; '
               f'done')
    where = f"{record.head_ip}:{head_archive.HEAD_FOLDER}/{cluster}/"

    def read() -> str:
        try:
            return launch.backend(record, state).output(record, command, timeout=LOG_TIMEOUT * 3)
        except ClusterError as exc:
            failed = ClusterError(f"the archive of cluster {name} is on its head, {where}, "
                                  f"which could not be read: {exc.message}", hint=exc.hint)
            seen = _seen()
            if seen is not None:   # one try per head and command, however many jobs
                seen[f"head {name}"] = failed
            raise failed from None

    failed = (_seen() or {}).get(f"head {name}")
    if isinstance(failed, ClusterError):
        raise failed
    text = _once(f"head {name} {job_id}", read)
    first, _, rest = text.partition("\n")
    table, found, job_log = rest.partition(f"\n{_LOG_FOLLOWS}\n")
    if not found or not _SAFE_ID.fullmatch(first):   # a folder name here: never `..` or a path
        return None
    try:
        job = _entry(json.loads(table), job_id)
    except ValueError:
        return None
    if job is None:
        return None
    local = _keep_here(local_folder(name) / first / "jobs" / f"{job_id}.log", job_log)
    return _archived(job, job_id, name, local, local_folder(name))


# One command's look at the archives (`one_look`): each location listed, each job table read,
# each failure met once, however many jobs the command asks about.
_LOOKS: list[dict[str, Any]] = []


@contextlib.contextmanager
def one_look() -> Iterator[None]:
    _LOOKS.append(_LOOKS[-1] if _LOOKS else {})
    try:
        yield
    finally:
        _LOOKS.pop()


def _seen() -> dict[str, Any] | None:
    return _LOOKS[-1] if _LOOKS else None


def _once(key: str, read: Callable[[], Any]) -> Any:
    seen = _seen()
    if seen is None:
        return read()
    if key not in seen:
        try:
            seen[key] = read()
        except ClusterError as exc:
            seen[key] = exc
    found = seen[key]
    if isinstance(found, ClusterError):
        raise found
    return found


def _listed(base: str) -> list[str]:
    """The archives under `base` (s3:// or a folder), newest first (their names sort by time)."""
    found: list[str] = _once(f"list {base}", lambda: _list(base))
    return found


def _list(base: str) -> list[str]:
    parsed = urllib.parse.urlparse(base)
    if parsed.scheme == "s3":
        prefix = parsed.path.strip("/") + "/"

        def pages() -> list[str]:
            return [p["Prefix"][len(prefix):].strip("/")
                    for page in _s3(base).get_paginator("list_objects_v2").paginate(
                        Bucket=parsed.netloc, Prefix=prefix, Delimiter="/")
                    for p in page.get("CommonPrefixes") or []]

        # the bucket is data: a name that is not a plain folder name (`..`) is not an archive
        names = [n for n in _s3_read(base, pages) or [] if _SAFE_ID.fullmatch(n)]
        return [f"{base}/{n}" for n in sorted(names, reverse=True)]
    folder = _folder(base)
    names = [p.name for p in folder.iterdir() if p.is_dir() and not p.is_symlink()] \
        if folder.is_dir() else []
    return [str(folder / n) for n in sorted(names, reverse=True)]


def _job_in(uri: str, name: str, job_id: str) -> Archived | None:
    parsed = urllib.parse.urlparse(uri)
    try:
        if parsed.scheme == "s3":
            local = local_folder(name) / Path(parsed.path).name
            key = parsed.path.strip("/")
            table = _once(f"table {uri}", lambda: _s3_text(uri, parsed.netloc,
                                                            f"{key}/jobs.json"))
            job = _entry(json.loads(table), job_id) if table is not None else None
            if job is None:
                return None
            text = _s3_text(uri, parsed.netloc, f"{key}/jobs/{job_id}.log")
            if text is None:
                return None
            log = _keep_here(local / "jobs" / f"{job_id}.log", text)
            below = local_folder(name)
        else:
            below = _folder(uri)
            job = _entry(json.loads(read_below(below, below / "jobs.json")), job_id)
            if job is None:
                return None
            log = below / "jobs" / f"{job_id}.log"
            with contextlib.suppress(FileNotFoundError):
                os.close(open_below(below, log))   # a link in its place: refused, here
    except Refused as exc:
        raise ClusterError(f"the archive {uri} was not read: {exc}", hint=_LINKS_HINT) from None
    except (OSError, ValueError, LookupError):
        return None
    return _archived(job, job_id, name, log, below)


def _archived(job: dict[str, Any], job_id: str, name: str, log: Path,
              below: Path | None = None) -> Archived:
    status = str(job.get("status") or "UNKNOWN")
    ended = status in ("SUCCEEDED", "FAILED", "STOPPED")
    return Archived(job_id, status if ended else "STOPPED",
                    str(job.get("message") or "") if ended else
                    f"stopped with cluster {name} while {status}",
                    _number(job.get("start_time")), _number(job.get("end_time")),
                    not ended, kept_at=log, where=f"cluster {name}", below=below)


def _entry(table: Any, job_id: str) -> dict[str, Any] | None:
    for job in table if isinstance(table, list) else []:
        if isinstance(job, dict) and job.get("submission_id") == job_id:
            return job
    return None


def _folder(uri: str) -> Path:
    parsed = urllib.parse.urlparse(uri)
    return Path(urllib.parse.unquote(parsed.path) if parsed.scheme == "file" else uri)


def _s3(where: str) -> Any:
    try:
        import boto3  # the endpoint (AWS_ENDPOINT_URL) and credentials from the environment
        from botocore.config import Config
    except ImportError:
        raise ClusterError(f"reading the archive {where} needs boto3, which is not installed",
                           hint='pip install "orchestrate-ray[aws]"') from None
    # a command waits on it: a few seconds for an S3 that does not answer, not minutes
    return boto3.session.Session().client("s3", config=Config(connect_timeout=5, read_timeout=30,
        retries={"max_attempts": 2, "mode": "standard"}))


def _s3_text(where: str, bucket: str, key: str) -> str | None:
    """The object's text; None when there is no such key."""
    def read() -> str:
        body = _s3(where).get_object(Bucket=bucket, Key=key)["Body"].read()
        return bytes(body).decode("utf-8", errors="replace")

    return _s3_read(where, read)


_MISSING = ("NoSuchKey", "404", "NotFound")
_REFUSED = ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
            "InvalidToken", "AllAccessDisabled")


def _s3_read(where: str, read: Callable[[], _T]) -> _T | None:
    """read(); None for a key that is not there; what botocore raises otherwise as a
    ClusterError naming the archive and what to do."""
    try:
        return read()
    except ClusterError:
        raise
    except Exception as exc:  # noqa: BLE001 - botocore's; anything else is a bug, raised
        if not type(exc).__module__.startswith(("botocore", "urllib3")):
            raise
        code = str(((getattr(exc, "response", None) or {}).get("Error") or {}).get("Code") or "")
        if code in _MISSING:
            return None
        raise _unreadable(where, exc, code) from None


def _unreadable(where: str, exc: Exception, code: str) -> ClusterError:
    credentials = (f"AWS credentials for {where} (s3:ListBucket and s3:GetObject) on this "
                   "machine: AWS_PROFILE, or `aws configure`")
    kind = type(exc).__name__
    if code == "NoSuchBucket":
        return ClusterError(f"the archive {where} cannot be read: its bucket does not exist",
                            hint="check `archive:` in the cluster file")
    if code in _REFUSED:
        return ClusterError(f"the archive {where} cannot be read: S3 refused ({code})",
                            hint=credentials)
    if kind in ("NoCredentialsError", "PartialCredentialsError", "NoRegionError",
                "CredentialRetrievalError"):
        return ClusterError(f"the archive {where} cannot be read: no AWS credentials here "
                            f"({exc})", hint=credentials)
    if code:
        return ClusterError(f"the archive {where} cannot be read: S3 answered {code}",
                            hint=credentials)
    return ClusterError(f"the archive {where} cannot be read: S3 did not answer ({exc})",
                        hint="check the network (and AWS_ENDPOINT_URL when it is set), then "
                             "run it again")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
