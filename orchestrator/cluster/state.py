"""The local state store: one folder per cluster under $ORCHESTRATE_HOME/clusters/<name>/.

    record.json        what we know about the cluster (see `Record`)
    auth_token         the cluster's Ray auth token, mode 0600, never printed
    ray-cluster.yaml   the rendered config handed to `ray up` (contains no secret)
    up.log / down.log  the launcher's full output
    lock               held (flock) by whoever changes the cluster: `up` and `down`

Every file is written atomically (temporary file in the same folder, fsync, rename), so a
crash or a concurrent reader never sees half a file.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

from ..errors import ClusterError

# Lifecycle states written to record.json.
LAUNCHING = "launching"    # `ray up` is (or was, if the run died) in progress
UP = "up"                  # `ray up` succeeded
FAILED = "failed"          # `ray up` failed; nodes may exist, `down` cleans up
INTERRUPTED = "interrupted"  # Ctrl-C or a kill during `up`; nodes may exist
STOPPING = "stopping"      # `ray down` in progress or failed part way

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def home() -> Path:
    return Path(os.environ.get("ORCHESTRATE_HOME") or Path.home() / ".orchestrate")


def clusters_dir() -> Path:
    return home() / "clusters"


def is_valid_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name))


def cluster_dir(name: str) -> Path:
    if not is_valid_name(name):
        raise ClusterError(f"invalid cluster name {name!r}")
    return clusters_dir() / name


@dataclasses.dataclass
class Record:
    name: str
    provider: str
    file: str                      # the user's cluster YAML, absolute
    config_hash: str               # sha256 of the rendered config given to `ray up`
    state: str = LAUNCHING
    head_ip: str | None = None
    dashboard_port: int = 8265
    dashboard_host: str = "0.0.0.0"  # where the dashboard binds on the head
    address: str | None = None     # job-submission address usable from this machine, if direct
    message: str | None = None     # why the last operation failed, for people
    created_at: float = dataclasses.field(default_factory=time.time)
    updated_at: float = dataclasses.field(default_factory=time.time)
    version: str = ""              # orchestrate version that last changed the cluster

    @property
    def tunneled(self) -> bool:
        return self.dashboard_host in ("127.0.0.1", "localhost", "::1")

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def atomic_write(path: Path, data: str | bytes, *, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_json(path: Path, what: str, problem_of, hint: str) -> dict | None:
    """A state file's JSON (None when it does not exist); ClusterError when it is damaged."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        problem = f"unreadable: {getattr(exc, 'strerror', None) or exc}"
    else:
        problem = problem_of(data)
        problem = problem and f"corrupted: {problem}"
    if problem:
        raise ClusterError(f"{what} {path} is {problem}", hint=hint)
    return data


def read_record(name: str) -> Record | None:
    folder = cluster_dir(name)
    data = _read_json(folder / "record.json", "the state file",
                      lambda data: _record_problem(data, name),
                      f"if the cluster is gone, remove {folder}; if it still runs, "
                      f"`ray down {rendered_path(name)}` stops it")
    if data is None:
        return None
    known = {f.name for f in dataclasses.fields(Record)}
    return Record(**{k: v for k, v in data.items() if k in known})


# Field -> the JSON types record.json may hold for it (bool is excluded from the numbers).
_RECORD_TYPES = {
    "name": (str,), "provider": (str,), "file": (str,), "config_hash": (str,), "state": (str,),
    "head_ip": (str, type(None)), "dashboard_port": (int,), "dashboard_host": (str,),
    "address": (str, type(None)), "message": (str, type(None)), "created_at": (int, float),
    "updated_at": (int, float), "version": (str,),
}
_REQUIRED = ("name", "provider", "file", "config_hash")


def _record_problem(data, name: str) -> str | None:
    """Why `data` (parsed record.json) cannot be a Record, or None when it can."""
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


def write_record(record: Record) -> None:
    from .. import __version__

    record.updated_at = time.time()
    record.version = __version__
    atomic_write(cluster_dir(record.name) / "record.json",
                 json.dumps(record.as_dict(), indent=2, sort_keys=True) + "\n")


def list_records() -> list[Record]:
    base = clusters_dir()
    if not base.is_dir():
        return []
    records = []
    for entry in sorted(base.iterdir()):
        if entry.is_dir() and is_valid_name(entry.name):
            record = read_record(entry.name)
            if record is not None:
                records.append(record)
    return records


def remove(name: str) -> None:
    """Forget a cluster: delete its folder (token included)."""
    shutil.rmtree(cluster_dir(name), ignore_errors=True)


def rendered_path(name: str) -> Path:
    return cluster_dir(name) / "ray-cluster.yaml"


def read_rendered(name: str) -> dict | None:
    """The config last handed to `ray up` (None before any), or ClusterError if it is damaged."""
    return _read_json(rendered_path(name), "the rendered config",
                      lambda data: None if isinstance(data, dict) else "expected a JSON object",
                      f"`orchestrate up` of the cluster's YAML writes it again; remove "
                      f"{cluster_dir(name)} once the cluster is gone")


def token_path(name: str) -> Path:
    return cluster_dir(name) / "auth_token"


def make_folder(name: str) -> Path:
    """The cluster's state folder, created private (0700) with a private clusters/ above it."""
    folder = cluster_dir(name)
    try:
        folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
    except OSError as exc:
        raise ClusterError(f"cannot create the state folder {folder}: {exc.strerror or exc}",
                           hint="ORCHESTRATE_HOME (default ~/.orchestrate) must be a writable "
                                "folder") from None
    return folder


def ensure_token(name: str) -> Path:
    """The cluster's auth token file, created once (0600) and reused for the cluster's life."""
    path = make_folder(name) / "auth_token"
    if not path.exists():
        # Same shape as Ray's own generator: 256 bits, hex.
        atomic_write(path, secrets.token_hex(32), mode=0o600)
    os.chmod(path, 0o600)
    return path


def read_token(name: str) -> str:
    try:
        token = token_path(name).read_text().strip()
    except FileNotFoundError:
        raise ClusterError(f"no auth token recorded for cluster {name!r}") from None
    except (OSError, UnicodeDecodeError) as exc:  # the message names the file, not its content
        raise ClusterError(f"the auth token of cluster {name!r} ({token_path(name)}) is "
                           f"unreadable: {type(exc).__name__}") from None
    if not token:
        raise ClusterError(f"the auth token file of cluster {name!r} ({token_path(name)}) "
                           f"is empty")
    return token


@contextlib.contextmanager
def locked(name: str, *, action: str) -> Iterator[None]:
    """Hold the cluster's lock for the whole of `up` or `down`; fail at once if it is taken."""
    folder = make_folder(name)
    fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            raise ClusterError(
                f"cluster {name!r} is busy: another orchestrate command holds its lock"
                + (f" ({holder})" if holder else ""),
                hint="wait for it to finish, then try again",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{action}, pid {os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the flock
