"""Today's StateStore: one folder on this machine, $ORCHESTRATE_HOME (default ~/.orchestrate).

    clusters/<name>/record.json        what we know about the cluster (`ClusterRecord`)
    clusters/<name>/ray-cluster.yaml   the rendered config handed to `ray up` (no secret in it)
    clusters/<name>/up.log, down.log   the launcher's full output (token masked)
    clusters/<name>/launcher/          Ray's own launcher files for this cluster
    clusters/<name>/lock               held by whoever changes the cluster: `up` and `down`
    jobs/<id>.json                     where each job went, so `logs JOB` needs no --cluster
    runs/<run name>.json               the last results of a run, for `orchestrate results`

Every file is written atomically (temporary file, fsync, rename), so a crash or a concurrent
reader never sees half a file; the home and its folders are private (0700), its files 0600
(`private_home`, on first use, tightens a home an older version left 0755). Tokens are not
here: see secrets.py.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from .. import __version__
from ..errors import ClusterError
from ..util.files import atomic_write, private_folder, read_json
from ..util.locks import Busy, held
from .store import ClusterRecord

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_KEY = re.compile(r"[^A-Za-z0-9._-]")


def home() -> Path:
    """The one place that reads ORCHESTRATE_HOME."""
    return Path(os.environ.get("ORCHESTRATE_HOME") or Path.home() / ".orchestrate")


RECORDS = ("jobs", "runs", "services")   # one JSON file per entry, written by FolderStore


def private_home() -> Path:
    """home(), private: made 0700 if missing; one that another user owns, or that is a shared
    folder (the sticky bit, as /tmp) is refused; one left wider (0.2.0 made it 0755, its
    entries 0644) is tightened, with its folders and the entries of jobs/, runs/, services/.
    A home that cannot be made (a file in its place) is left to the first write to report."""
    root = home()
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = root.stat()
    except OSError:
        return root
    hint = ("set ORCHESTRATE_HOME to a folder of your own (default ~/.orchestrate); it holds "
            "tokens and what this machine ran")
    if not stat.S_ISDIR(info.st_mode):
        return root
    if info.st_uid != os.getuid():
        raise ClusterError(f"the state folder {root} belongs to another user", hint=hint)
    if info.st_mode & stat.S_ISVTX and info.st_mode & 0o022:
        raise ClusterError(f"the state folder {root} is writable by other users (a shared "
                           f"folder, as /tmp)", hint=hint)
    if stat.S_IMODE(info.st_mode) & 0o077:
        _tighten(root)
    return root


def _tighten(root: Path) -> None:
    """The home 0700, each folder in it 0700, each entry of its records 0600 (not following
    symlinks: only what this user's orchestrate made). A file system that keeps no modes
    (some network mounts) is left as it is."""
    try:
        os.chmod(root, 0o700)
    except OSError:
        return
    with contextlib.suppress(OSError):
        for folder in root.iterdir():
            if folder.is_symlink() or not folder.is_dir():
                continue
            os.chmod(folder, 0o700)
            if folder.name in RECORDS:
                for entry in folder.iterdir():
                    if entry.is_file() and not entry.is_symlink():
                        os.chmod(entry, 0o600)


def is_valid_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name))


# Field -> the JSON types record.json may hold for it (bool is excluded from the numbers).
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "provider": (str,), "file": (str,), "config_hash": (str,), "state": (str,),
    "head_ip": (str, type(None)), "dashboard_port": (int,), "dashboard_host": (str,),
    "address": (str, type(None)), "message": (str, type(None)), "created_at": (int, float),
    "updated_at": (int, float), "version": (str,), "up_at": (int, float, type(None)),
}
_REQUIRED = ("name", "provider", "file", "config_hash")


def _record_problem(data: Any, name: str) -> str | None:
    """Why `data` (parsed record.json) cannot be a ClusterRecord, or None when it can."""
    if not isinstance(data, dict):
        return "expected a JSON object"
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        return "missing " + ", ".join(missing)
    for key, types in _RECORD_TYPES.items():
        if key in data and (isinstance(data[key], bool) or not isinstance(data[key], types)):
            return f"'{key}' has the wrong type ({type(data[key]).__name__})"
    if data["name"] != name:
        return f"it names cluster {data['name']!r}, not {name!r}"
    return None


class FolderStore:
    """A StateStore in one local folder (see the module docstring for its layout)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    # --- clusters ---
    def cluster_dir(self, name: str) -> Path:
        if not is_valid_name(name):
            raise ClusterError(f"invalid cluster name {name!r}")
        return self.root / "clusters" / name

    def _make_folder(self, name: str) -> Path:
        folder = self.cluster_dir(name)
        try:
            private_folder(folder.parent)
            return private_folder(folder)
        except OSError as exc:
            raise ClusterError(f"cannot create the state folder {folder}: {exc.strerror or exc}",
                               hint="ORCHESTRATE_HOME (default ~/.orchestrate) must be a "
                                    "writable folder") from None

    @contextlib.contextmanager
    def lock(self, name: str, *, action: str) -> Iterator[None]:
        """Held for the whole of `up` or `down`; fails at once if someone else holds it."""
        folder = self._make_folder(name)
        try:
            with held(folder / "lock", action=action):
                yield
        except Busy as busy:
            raise ClusterError(
                f"cluster {name!r} is busy: another orchestrate command holds its lock"
                + (f" ({busy.holder})" if busy.holder else ""),
                hint="wait for it to finish, then try again") from None

    def read_cluster(self, name: str) -> ClusterRecord | None:
        folder = self.cluster_dir(name)
        path = folder / "record.json"
        data, problem = read_json(path, lambda data: _record_problem(data, name))
        if problem:
            raise ClusterError(f"the state file {path} is {problem}",
                               hint=f"if the cluster is gone, remove {folder}; if it still runs, "
                                    f"`ray down {self.rendered_path(name)}` stops it")
        if data is None:
            return None
        known = {f.name for f in dataclasses.fields(ClusterRecord)}
        return ClusterRecord(**{k: v for k, v in data.items() if k in known})

    def write_cluster(self, record: ClusterRecord) -> None:
        record.updated_at = time.time()
        record.version = __version__
        self._make_folder(record.name)
        atomic_write(self.cluster_dir(record.name) / "record.json",
                     json.dumps(record.as_dict(), indent=2, sort_keys=True) + "\n")

    def list_clusters(self) -> list[ClusterRecord]:
        base = self.root / "clusters"
        if not base.is_dir():
            return []
        records = []
        for entry in sorted(base.iterdir()):
            if entry.is_dir() and is_valid_name(entry.name):
                record = self.read_cluster(entry.name)
                if record is not None:
                    records.append(record)
        return records

    def forget_cluster(self, name: str) -> None:
        shutil.rmtree(self.cluster_dir(name), ignore_errors=True)

    def rendered_path(self, name: str) -> Path:
        return self.cluster_dir(name) / "ray-cluster.yaml"

    def read_rendered(self, name: str) -> dict[str, Any] | None:
        data, problem = read_json(self.rendered_path(name),
                                  lambda data: None if isinstance(data, dict)
                                  else "expected a JSON object")
        if problem:
            raise ClusterError(f"the rendered config {self.rendered_path(name)} is {problem}",
                               hint=f"`orchestrate up` of the cluster's YAML writes it again; "
                                    f"remove {self.cluster_dir(name)} once the cluster is gone")
        return cast(dict[str, Any] | None, data)  # checked to be a dict above

    def write_rendered(self, name: str, config: dict[str, Any]) -> Path:
        self._make_folder(name)
        path = self.rendered_path(name)
        atomic_write(path, json.dumps(config, indent=2, sort_keys=True) + "\n")
        return path

    def workspace(self, name: str) -> Path:
        folder = self._make_folder(name)
        (folder / "launcher").mkdir(mode=0o700, exist_ok=True)
        return folder

    # --- jobs and runs submitted from here ---
    def _entry(self, kind: str, key: str) -> Path:
        return self.root / kind / (_KEY.sub("_", key) + ".json")

    def _read_entry(self, kind: str, key: str) -> dict[str, Any] | None:
        data, _problem = read_json(self._entry(kind, key),
                                   lambda data: None if isinstance(data, dict) else "not an object")
        return cast(dict[str, Any] | None, data)  # checked to be a dict; damaged reads as None

    def record_job(self, job_id: str, *, cluster: str | None, experiment: str,
                   name: str) -> None:
        atomic_write(self._entry("jobs", job_id), json.dumps(
            {"job_id": job_id, "cluster": cluster, "experiment": experiment, "name": name,
             "submitted_at": time.time()}))

    def job(self, job_id: str) -> dict[str, Any] | None:
        return self._read_entry("jobs", job_id)

    def update_job(self, job_id: str, fields: dict[str, Any]) -> None:
        entry = self.job(job_id)
        if entry is not None:
            atomic_write(self._entry("jobs", job_id), json.dumps({**entry, **fields}, default=str))

    def jobs(self) -> list[dict[str, Any]]:
        folder = self.root / "jobs"
        found = [self._read_entry("jobs", p.stem) for p in folder.glob("*.json")] \
            if folder.is_dir() else []
        entries = [entry for entry in found if entry is not None]
        return sorted(entries, key=lambda e: -float(e.get("submitted_at") or 0))

    def record_run(self, key: str, summary: dict[str, Any], job_id: str) -> None:
        atomic_write(self._entry("runs", key),
                     json.dumps(dict(summary, job_id=job_id), default=str))

    def run(self, key: str) -> dict[str, Any] | None:
        return self._read_entry("runs", key)

    # --- services deployed from here (`orchestrate serve`) ---
    def record_service(self, name: str, entry: dict[str, Any]) -> None:
        atomic_write(self._entry("services", name), json.dumps(dict(entry, name=name), default=str))

    def service(self, name: str) -> dict[str, Any] | None:
        return self._read_entry("services", name)

    def services(self) -> list[dict[str, Any]]:
        folder = self.root / "services"
        found = [self._read_entry("services", p.stem) for p in sorted(folder.glob("*.json"))] \
            if folder.is_dir() else []
        return [entry for entry in found if entry is not None]

    def forget_service(self, name: str) -> None:
        self._entry("services", name).unlink(missing_ok=True)
