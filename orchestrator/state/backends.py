"""Where a project's state document lives, and the lock whoever changes it holds.

    open_backend(url, default_folder=...)   "" or file:///folder -> FileBackend; s3://b/p -> S3Backend
    backend.read() -> (bytes, version) | None        the document is opaque bytes here
    backend.write(data, version) -> new version      only over `version` (None: only if none yet)
    with locked(backend, "apply", timeout=0) as info: ...   the lock, released however we leave

FileBackend(folder): folder/state.json (0600) and folder/state.lock (0600), folder 0700; a
version is the sha256 of the content. S3Backend: <prefix>/state.json and <prefix>/state.lock,
with S3's conditional writes (If-None-Match: *, If-Match: ETag); a version is the ETag.

The lock is a note (LockInfo: who, where, what, since when, which CI job) that exists or not;
it is not tied to a process, so a command that dies hard leaves it, and `orchestrate
force-unlock ID` removes it. A lock note that cannot be read (a person edited it, a disk broke)
still locks: `holder()` says None, and force-unlock takes the id "unknown" for it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import getpass
import json
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from ..errors import StateError, StateLocked, Terminated

SCHEMES = "file:///ABSOLUTE/FOLDER, s3://BUCKET/PREFIX (or nothing: a folder under ORCHESTRATE_HOME)"
UNREADABLE = "unknown"   # the id force-unlock takes for a lock note that cannot be read
STATE, LOCK = "state.json", "state.lock"


@dataclasses.dataclass(frozen=True)
class LockInfo:
    id: str               # uuid4 hex
    who: str              # user@host
    host: str
    pid: int
    operation: str        # "apply", "up", "down", ...
    created: float        # time.time()
    ci_url: str | None    # the CI job holding it, when there is one

    @classmethod
    def new(cls, operation: str) -> LockInfo:
        host = socket.gethostname()
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # a uid with no name (containers)
            user = str(os.getuid())
        return cls(id=uuid.uuid4().hex, who=f"{user}@{host}", host=host, pid=os.getpid(),
                   operation=operation, created=time.time(), ci_url=_ci_url())

    @classmethod
    def unreadable(cls) -> LockInfo:
        """What force_release returns for a lock note that could not be read."""
        return cls(id=UNREADABLE, who="", host="", pid=0, operation="", created=0.0, ci_url=None)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> LockInfo | None:
        """The lock note, or None when it is damaged (never raises)."""
        if not isinstance(data, dict):
            return None
        types: dict[str, tuple[type, ...]] = {
            "id": (str,), "who": (str,), "host": (str,), "pid": (int,), "operation": (str,),
            "created": (int, float), "ci_url": (str, type(None))}
        for key, allowed in types.items():
            value = data.get(key)
            if isinstance(value, bool) or not isinstance(value, allowed) or value == "":
                return None
        return cls(id=data["id"], who=data["who"], host=data["host"], pid=data["pid"],
                   operation=data["operation"], created=float(data["created"]),
                   ci_url=data["ci_url"])

    def describe(self) -> str:
        if self.id == UNREADABLE:
            return f"an unreadable lock (lock id {UNREADABLE})"
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.created))
        text = f"{self.operation} by {self.who} (pid {self.pid}), since {since}, lock id {self.id}"
        return text + (f", CI: {self.ci_url}" if self.ci_url else "")

    def to_bytes(self) -> bytes:
        return (json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n").encode()


def _ci_url() -> str | None:
    env = os.environ
    if env.get("GITHUB_RUN_ID") and env.get("GITHUB_REPOSITORY"):
        server = env.get("GITHUB_SERVER_URL") or "https://github.com"
        return f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
    return env.get("CI_JOB_URL") or None


def parse_lock(data: bytes) -> LockInfo | None:
    try:
        return LockInfo.from_dict(json.loads(data))
    except ValueError:  # includes UnicodeDecodeError
        return None


class Backend(Protocol):
    url: str  # for messages (never credentials)

    def read(self) -> tuple[bytes, str] | None:
        """(content, version), or None when there is no state yet."""

    def write(self, data: bytes, version: str | None) -> str:
        """Only over `version` (None: only if no state exists yet); the new version.
        StateConflict otherwise."""

    def acquire(self, info: LockInfo) -> None:
        """Take the lock; StateLocked(holder=LockInfo | None) if it is held."""

    def release(self, lock_id: str) -> None:
        """Remove the lock only if it is `lock_id`'s; nothing if it is gone."""

    def holder(self) -> LockInfo | None:
        """Who holds the lock now (None: nobody, or its note is unreadable)."""

    def force_release(self, lock_id: str) -> LockInfo:
        """Remove the lock whatever holds it, if its id is `lock_id` ("unknown" for an
        unreadable note); StateError if there is none or it has another id."""


def refused(url: str, found: tuple[bool, LockInfo | None]) -> StateLocked:
    """The refusal of a lock, from what the lock note said when read just after."""
    exists, holder = found
    if not exists:  # released between our attempt and our look at it
        return StateLocked(f"the state at {url} was locked by another command a moment ago",
                           holder=None, hint="try again, or pass --lock-timeout SECONDS")
    if holder is None:
        return StateLocked(
            f"the state at {url} is locked, and its lock note is unreadable", holder=None,
            hint=f"if no orchestrate command is running on it: orchestrate force-unlock "
                 f"{UNREADABLE}")
    return StateLocked(
        f"the state at {url} is locked: {holder.describe()}", holder=holder,
        hint=f"wait for it, pass --lock-timeout SECONDS, or if its holder is gone: "
             f"orchestrate force-unlock {holder.id}")


def not_held(url: str) -> StateError:
    return StateError(f"the state at {url} is not locked", hint="there is nothing to unlock")


def other_id(url: str, holder: LockInfo | None, lock_id: str) -> StateError:
    held_id = holder.id if holder else UNREADABLE
    what = holder.describe() if holder else "an unreadable lock"
    return StateError(f"the lock on the state at {url} has id {held_id}, not {lock_id} ({what})",
                      hint=f"check that its holder is gone, then: orchestrate force-unlock {held_id}")


def open_backend(url: str, *, default_folder: Path) -> Backend:
    """"" -> FileBackend(default_folder); file:///abs/folder -> FileBackend; s3://b/p -> S3Backend."""
    if not url:
        from .backend_file import FileBackend

        return FileBackend(default_folder)
    parts = urlsplit(url)
    if parts.scheme == "file":
        path = unquote(parts.path)
        if parts.netloc not in ("", "localhost") or not path.startswith("/") or parts.query:
            raise StateError(f"the state URL {url!r} is not file:// and an absolute folder",
                             hint="write it as file:///ABSOLUTE/FOLDER")
        from .backend_file import FileBackend

        return FileBackend(Path(path))
    if parts.scheme == "s3":
        from .backend_s3 import S3Backend

        return S3Backend(url)
    raise StateError(f"the state URL {url!r} has a scheme orchestrate does not know",
                     hint=f"use one of: {SCHEMES}")


# --- the lock, held for a block --------------------------------------------------------------

class _Sigterm:
    """SIGTERM around a lock (main thread only; elsewhere this does nothing). While the lock is
    taken or released, a SIGTERM is noted, so the process never dies between creating the lock
    and knowing it holds it; while it is held, SIGTERM raises Terminated once, so the `finally`
    that releases it runs. After, the previous handler is back, and a noted SIGTERM is raised."""

    def __init__(self) -> None:
        self.pending = False
        self.raising = False
        self.previous: Any = None
        self.installed = False

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        if self.raising:
            self.raising = False
            raise Terminated()
        self.pending = True

    def __enter__(self) -> _Sigterm:
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._handle)
            self.installed = True
        return self

    def arm(self) -> None:
        self.raising = True
        if self.pending:
            self.pending = self.raising = False
            raise Terminated()

    def disarm(self) -> None:
        self.raising = False

    def __exit__(self, exc_type: type[BaseException] | None, *_: Any) -> None:
        if self.installed:
            previous = self.previous if self.previous is not None else signal.SIG_DFL
            signal.signal(signal.SIGTERM, previous)
        if self.pending and not (exc_type and issubclass(exc_type, KeyboardInterrupt)):
            raise Terminated()


def _acquire(backend: Backend, info: LockInfo, timeout: float,
             progress: Callable[[str], None], sigterm: _Sigterm) -> None:
    deadline = time.monotonic() + timeout
    told = False
    while True:
        try:
            backend.acquire(info)
            return
        except StateLocked as refused:
            if time.monotonic() >= deadline:
                if timeout > 0:
                    raise StateLocked(f"{refused.message} (after waiting {timeout:g} s)",
                                      holder=refused.holder, hint=refused.hint) from None
                raise
            if not told:
                who = refused.holder.describe() if refused.holder else "an unreadable lock"
                progress(f"waiting for the state lock held by {who} (up to {timeout:g} s)")
                told = True
        pause = time.monotonic() + min(1.0, max(0.0, deadline - time.monotonic()))
        while time.monotonic() < pause:
            if sigterm.pending:
                raise Terminated()
            time.sleep(0.1)


@contextlib.contextmanager
def locked(backend: Backend, operation: str, *, timeout: float = 0,
           progress: Callable[[str], None] = lambda _: None) -> Iterator[LockInfo]:
    """Hold the state's lock for the block. `timeout` 0: one try (StateLocked naming the
    holder); above 0: try again about every second until then. Released however the block
    ends: an exception, Ctrl-C, or SIGTERM (raised as errors.Terminated in the main thread)."""
    info = LockInfo.new(operation)
    with _Sigterm() as sigterm:
        _acquire(backend, info, timeout, progress, sigterm)
        try:
            try:
                sigterm.arm()
                yield info
            finally:
                sigterm.disarm()
        finally:
            backend.release(info.id)
