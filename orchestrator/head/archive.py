"""A cluster's logs, copied off the head before it goes down (by `orchestrate down`, `apply`,
autostop), so `orchestrate logs` and `runs` still answer once the cluster is gone.

Run on the head: `cd ~/.orchestrate && python -m head.archive --reason REASON [--at EPOCH]`.
Where to: the cluster file's `archive` (`metadata.orchestrate.archive` of the config Ray left
on the head, `~/ray_bootstrap_config.yaml`): `s3://bucket/prefix` (boto3, the endpoint from
the environment) or `file:///folder`; none: the head's own `~/.orchestrate/archive`, which the
launcher then copies to its machine. One archive is

    <location>/<cluster_name>/<UTC stamp>-<reason>/
        jobs.json       Ray's job table: id, status, message, times, metadata, entrypoint, and
                        the names (never the values) of the runtime_env's env_vars
        jobs/<id>.log   each job's driver log (the Job API's, else the driver's log file), its
                        last JOB_LOG_CAP bytes; newest jobs first, JOB_LOGS_BUDGET in all
        session/...     Ray's session log files, newest first, at most SESSION_BUDGET bytes:
                        only this user's regular files with Ray's log names, from a session
                        folder proven this user's (`head.session`: another user can swap
                        Ray's world-writable /tmp/ray); never runtime_env*.log (the runtime
                        envs, env var values too), nor the job-driver-<id>.log of a job in
                        jobs.json (capped in jobs/)
        README          what the archive holds, and what was cut or left out
        stopped.json    {"reason", "at", **details}

The Job API is asked (with the token) only once its listener is proven this user's Ray
(`head.listener`); else jobs.json is empty and the README says why. The layout (`build`) and the
copy (`publish`) are also what the launcher uses when the head has no archiver (a cluster
launched before there was one): it builds the archive from the Job API. Standard library only;
boto3 is imported where S3 is written.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

from .listener import NotOurs, get_json
from .session import Entry, Logs, Refused, open_logs

BOOTSTRAP_CONFIG = "~/ray_bootstrap_config.yaml"
HEAD_FOLDER = "~/.orchestrate/archive"     # when the cluster file names no archive
SESSION_LOGS = "/tmp/ray/session_latest/logs"   # <Ray's temp folder>/<session>/logs
SESSION_BUDGET = 50 * 1024 * 1024          # bytes of session logs kept, newest files first
JOB_LOG_CAP = 10 * 1024 * 1024             # bytes kept of one driver log: its end
JOB_LOGS_BUDGET = 100 * 1024 * 1024        # bytes of driver logs in all, newest jobs first
# The runtime env agent's own log and its per-job runtime_env_setup-<job>.log: both may print
# a job's runtime_env, env var values with it (Ray's conda plugin at INFO, pip and uv at DEBUG).
SECRET_LOGS = re.compile(r"runtime_env.*")
TOKEN_FILE = "~/.ray/auth_token"
REQUEST_TIMEOUT = 10.0
# What jobs.json keeps of a job in Ray's table; runtime_env is reduced to its env_vars' names
JOB_FIELDS = ("submission_id", "job_id", "type", "status", "message", "error_type",
              "start_time", "end_time", "metadata", "entrypoint", "driver_exit_code",
              "entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_resources")
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_DASHBOARD_PORT = re.compile(r"\s--dashboard-port(?:=|\s+)(\d+)")


def location_of(config: dict[str, Any]) -> str | None:
    """The archive the cluster file names (cluster_settings.archive, read without importing
    it: the head has only this package)."""
    found = ((config.get("metadata") or {}).get("orchestrate") or {}).get("archive")
    return str(found) if found else None


def slug(reason: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", reason.lower()).strip("-")[:40] or "stopped"


def archive_name(reason: str, at: float) -> str:
    """`<UTC stamp>-<reason>`: names sort oldest to newest."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at)) + "-" + slug(reason)


def destination(config: dict[str, Any], reason: str, at: float) -> str:
    """Where `run` writes the archive: a URI (s3://, file://)."""
    base = location_of(config) or "file://" + os.path.expanduser(HEAD_FOLDER)
    return f"{base.rstrip('/')}/{config.get('cluster_name', 'cluster')}/{archive_name(reason, at)}"


def run(config: dict[str, Any], reason: str, details: dict[str, Any], *,
        at: float | None = None, address: str | None = None, token: str | None = None,
        session_logs: str = SESSION_LOGS, budget: int = SESSION_BUDGET) -> str | None:
    """Archive this head's jobs and logs; the location written (None: no job table and no
    session logs to keep)."""
    at = time.time() if at is None else at
    address = address or f"http://127.0.0.1:{dashboard_port(config)}"
    token = token if token is not None else read_token()
    notes: list[str] = []
    try:
        logs, refused = open_logs(session_logs), None
    except (Refused, OSError) as exc:
        logs, refused = None, f"Ray's session logs left out: {exc}"
    try:
        jobs = job_table(address, token)
    except NotOurs as exc:
        notes.append(f"Ray's Job API was not asked: {exc}")
        jobs = []
    except (OSError, ValueError) as exc:   # URLError, HTTPError, timeouts, not JSON: the
        # session's files still count
        notes.append(f"Ray's job table could not be read ({exc}); driver logs are the files")
        jobs = []
    try:
        driver_logs = {job["submission_id"]: driver_log(address, token, job["submission_id"],
                                                        logs) for job in jobs}
        if not jobs and logs is None and refused is None:
            return None
        target = destination(config, reason, at)
        with tempfile.TemporaryDirectory(prefix="orchestrate-archive-") as staging:
            build(Path(staging), jobs, driver_logs, reason=reason, at=at, details=details,
                  session_logs=logs, budget=budget, notes=notes,
                  no_session=refused)
            publish(Path(staging), target)
    finally:
        if logs is not None:
            logs.close()
    return target


def dashboard_port(config: dict[str, Any]) -> int:
    for command in config.get("head_start_ray_commands") or []:
        found = _DASHBOARD_PORT.search(f" {command}")
        if found:
            return int(found.group(1))
    return 8265


def read_token() -> str | None:
    found = os.environ.get("RAY_AUTH_TOKEN")
    if found:
        return found.strip()
    try:
        return Path(os.path.expanduser(TOKEN_FILE)).read_text().strip() or None
    except OSError:
        return None


def _get(address: str, path: str, token: str | None) -> Any:
    return get_json(address, path, token, REQUEST_TIMEOUT)


def job_table(address: str, token: str | None) -> list[dict[str, Any]]:
    """The jobs of Ray's table that were submitted (a submission id fit for a file name)."""
    found = _get(address, "/api/jobs/", token)
    return [job for job in found if isinstance(job, dict)
            and isinstance(job.get("submission_id"), str)
            and _SAFE_ID.fullmatch(job["submission_id"])] if isinstance(found, list) else []


def driver_log(address: str, token: str | None, job_id: str, logs: Logs | None) -> str:
    """The job's driver log: the Job API's, else the driver's file in the session's logs."""
    try:
        found = _get(address, f"/api/jobs/{urllib.parse.quote(job_id, safe='')}/logs", token)
        if isinstance(found, dict) and isinstance(found.get("logs"), str):
            return str(found["logs"])
    except (OSError, ValueError):   # not ours, no answer, or not JSON
        pass
    if logs is None:
        return ""
    try:
        with os.fdopen(logs.open(f"job-driver-{job_id}.log"), "rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - JOB_LOG_CAP - 4))   # the cap's bytes and a character's
            return file.read().decode(errors="replace")
    except OSError:
        return ""


def public(job: dict[str, Any]) -> dict[str, Any]:
    """What jobs.json keeps of a job: no env_vars' values (secrets travel there)."""
    kept = {key: job.get(key) for key in JOB_FIELDS if key in job}
    env = (job.get("runtime_env") or {}).get("env_vars") if isinstance(
        job.get("runtime_env"), dict) else None
    kept["env_var_names"] = sorted(env) if isinstance(env, dict) else []
    return kept


def session_files(logs: Logs, budget: int, skip: frozenset[str] = frozenset()
                  ) -> tuple[list[Entry], list[Entry], int]:
    """Ray's session log files, newest first, as many as fit in `budget` bytes; those left
    out for the budget; and how many entries are not Ray's logs or not ours (`Logs.listing`).
    Never runtime_env*.log (SECRET_LOGS), nor files named in `skip`."""
    found, strangers = logs.listing()
    kept: list[Entry] = []
    left: list[Entry] = []
    total = 0
    for entry in sorted(found, key=lambda e: (-e.mtime, e.path)):
        name = entry.path.rsplit("/", 1)[-1]
        if SECRET_LOGS.fullmatch(name) or name in skip:
            continue
        if total + entry.size <= budget:
            kept.append(entry)
            total += entry.size
        else:
            left.append(entry)
    return kept, left, strangers


def copy_session(logs: Logs, kept: list[Entry], folder: Path, notes: list[str]) -> None:
    """The kept files into `folder`, each as it was listed (no more than its listed size,
    never a file swapped in since)."""
    for entry in kept:
        copy = folder / entry.path
        copy.parent.mkdir(parents=True, exist_ok=True)
        try:
            with os.fdopen(logs.open(entry.path, entry.identity), "rb") as source, \
                    open(copy, "wb") as out:
                out.write(source.read(entry.size))
        except OSError as exc:
            notes.append(f"session/{entry.path} not copied: {exc}")


def build(staging: Path, jobs: list[dict[str, Any]], logs: dict[str, str], *, reason: str,
          at: float, details: dict[str, Any], session_logs: Logs | None,
          budget: int = SESSION_BUDGET, notes: list[str] | None = None,
          no_session: str | None = None) -> None:
    """The archive's files in `staging` (see the module's docstring). Without `session_logs`
    the README says `no_session`, by default that the launcher built it."""
    notes = list(notes or [])
    (staging / "jobs").mkdir(parents=True, exist_ok=True)
    table = sorted((public(job) for job in jobs), key=lambda j: str(j.get("submission_id")))
    (staging / "jobs.json").write_text(json.dumps(table, indent=1, sort_keys=True, default=str))
    job_logs(staging / "jobs", jobs, logs, notes)
    kept: list[Entry] = []
    left: list[Entry] = []
    if session_logs is None:
        notes.append(no_session or "Ray's session logs are not here: archived from the "
                     "launcher through the Job API (the head had no archiver)")
    else:
        kept, left, strangers = session_files(
            session_logs, budget,
            frozenset(f"job-driver-{job['submission_id']}.log" for job in jobs))
        notes.append("session/: runtime_env*.log left out (they may hold the runtime envs' "
                     "env var values), and the job-driver-<id>.log of every job in jobs.json "
                     "(under jobs/, or left out there)")
        notes.append(f"left out: {strangers} files not Ray's logs or not ours (only this "
                     "user's regular files with Ray's log names are copied)")
        if session_logs.shared:
            notes.append(f"Ray's temp folder or a folder of {session_logs.path} is writable by "
                         "other users (Ray 2.60 makes /tmp/ray so): another user could have "
                         "moved this user's own files there; start Ray with --temp-dir in a "
                         "0700 folder to close that")
        copy_session(session_logs, kept, staging / "session", notes)
    stopped = {**details, "reason": reason, "at": at}
    (staging / "stopped.json").write_text(json.dumps(stopped, indent=1, sort_keys=True,
                                                     default=str))
    lines = [f"Logs of a Ray cluster, archived by orchestrate before it stopped ({reason}).",
             "jobs.json: Ray's job table (env_vars' names only); jobs/<id>.log: each job's "
             f"driver log (its last {JOB_LOG_CAP} bytes; newest jobs first, at most "
             f"{JOB_LOGS_BUDGET} bytes in all);",
             f"session/: Ray's session log files, newest first, at most {budget} bytes "
             f"({len(kept)} kept, {len(left)} left out); stopped.json: why and when.", ""]
    lines += [f"note: {note}" for note in notes]
    if left:
        lines.append("left out (newest first, bytes):")
        lines += [f"  {entry.path} {entry.size}" for entry in left]
    (staging / "README").write_text("\n".join(lines) + "\n")


def job_logs(folder: Path, jobs: list[dict[str, Any]], logs: dict[str, str],
             notes: list[str], cap: int | None = None, budget: int | None = None) -> None:
    """Write the driver logs, newest jobs first: each its last `cap` bytes, `budget` bytes in
    all; what was cut or left out goes to `notes`."""
    cap = JOB_LOG_CAP if cap is None else cap
    budget = JOB_LOGS_BUDGET if budget is None else budget
    started = {str(job.get("submission_id")): job.get("start_time") for job in jobs}

    def newest_first(job_id: str) -> tuple[float, str]:
        start = started.get(job_id)
        return (-start if isinstance(start, (int, float)) else 0.0, job_id)

    total = 0
    for job_id in sorted(logs, key=newest_first):
        if not _SAFE_ID.fullmatch(job_id):
            continue
        data = logs[job_id].encode("utf-8", errors="replace")
        if len(data) > cap:
            notes.append(f"jobs/{job_id}.log: cut to its last {cap} bytes "
                         f"({len(data) - cap} bytes left out)")
            data = data[-cap:]
            while data and data[0] & 0xC0 == 0x80:   # not from the middle of a character
                data = data[1:]
        if total + len(data) > budget:
            notes.append(f"jobs/{job_id}.log: left out ({len(data)} bytes): the job logs "
                         f"reached {budget} bytes in all")
            continue
        (folder / f"{job_id}.log").write_bytes(data)
        total += len(data)


def publish(staging: Path, target: str) -> None:
    """Copy `staging`'s files to `target` (s3://bucket/prefix, file:///folder or a path)."""
    parsed = urllib.parse.urlparse(target)
    files = sorted(p for p in staging.rglob("*") if p.is_file())
    if parsed.scheme == "s3":
        import boto3  # on AWS heads; the endpoint (AWS_ENDPOINT_URL) from the environment

        client = boto3.client("s3")
        prefix = parsed.path.strip("/")
        for path in files:
            key = f"{prefix}/{path.relative_to(staging).as_posix()}".lstrip("/")
            client.upload_file(str(path), parsed.netloc, key)
        return
    folder = Path(urllib.parse.unquote(parsed.path) if parsed.scheme == "file" else target)
    for path in files:
        copy = folder / path.relative_to(staging)
        _private_dirs(copy.parent)
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out, path.open("rb") as source:
            shutil.copyfileobj(source, out)
        os.chmod(copy, 0o600)


def _private_dirs(folder: Path) -> None:
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        made.mkdir(mode=0o700)
        os.chmod(made, 0o700)


def load_config(path: str = BOOTSTRAP_CONFIG) -> dict[str, Any]:
    import yaml  # a Ray dependency (pyyaml); the bootstrap config is JSON-compatible YAML

    with open(os.path.expanduser(path)) as source:
        found = yaml.safe_load(source)
    return found if isinstance(found, dict) else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m head.archive")
    parser.add_argument("--reason", required=True)
    parser.add_argument("--at", type=float, default=None, help="epoch seconds (the stamp)")
    parser.add_argument("--config", default=BOOTSTRAP_CONFIG)
    parser.add_argument("--detail", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    details = dict(item.split("=", 1) for item in args.detail if "=" in item)
    try:
        written = run(load_config(args.config), args.reason, details, at=args.at)
    except Exception as exc:  # noqa: BLE001 - one line for whoever runs it, never a traceback
        print(f"archive failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"archived to {written}" if written else "nothing to archive")
    return 0


if __name__ == "__main__":
    sys.exit(main())
