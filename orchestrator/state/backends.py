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
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import StateError, StateLocked, Terminated
from .backend_base import Backend, LockInfo

__all__ = ["SCHEMES", "Backend", "LockInfo", "locked", "open_backend"]

SCHEMES = "file:///ABSOLUTE/FOLDER, s3://BUCKET/PREFIX (or nothing: a folder under ORCHESTRATE_HOME)"
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
