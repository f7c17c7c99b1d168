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


def cluster_dir(name: str) -> Path:
    if not _NAME.match(name):
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


def read_record(name: str) -> Record | None:
    path = cluster_dir(name) / "record.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"the state file {path} is unreadable: {exc}",
                           hint="remove it by hand once the cluster is gone") from exc
    known = {f.name for f in dataclasses.fields(Record)}
    return Record(**{k: v for k, v in data.items() if k in known})


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
        if entry.is_dir() and _NAME.match(entry.name):
            record = read_record(entry.name)
            if record is not None:
                records.append(record)
    return records


def remove(name: str) -> None:
    """Forget a cluster: delete its folder (token included)."""
    shutil.rmtree(cluster_dir(name), ignore_errors=True)


def token_path(name: str) -> Path:
    return cluster_dir(name) / "auth_token"


def ensure_token(name: str) -> Path:
    """The cluster's auth token file, created once (0600) and reused for the cluster's life."""
    path = token_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    if not path.exists():
        # Same shape as Ray's own generator: 256 bits, hex.
        atomic_write(path, secrets.token_hex(32), mode=0o600)
    os.chmod(path, 0o600)
    return path


def read_token(name: str) -> str:
    try:
        return token_path(name).read_text().strip()
    except FileNotFoundError as exc:
        raise ClusterError(f"no auth token recorded for cluster {name!r}") from exc


@contextlib.contextmanager
def locked(name: str, *, action: str) -> Iterator[None]:
    """Hold the cluster's lock for the whole of `up` or `down`; fail at once if it is taken."""
    folder = cluster_dir(name)
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
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
