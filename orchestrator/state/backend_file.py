"""A project's state in a folder: state.json (0600) and state.lock (0600), folder 0700; a
version is the sha256 of the content (see backends.py for the Backend it satisfies)."""
from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from ..errors import StateConflict, StateError
from ..util.files import atomic_write, private_folder
from ..util.locks import Busy, held
from .backend_base import LOCK, STATE, UNREADABLE, LockInfo, not_held, other_id, parse_lock, refused

# --- on this machine (or a shared file system) ---------------------------------------------

class FileBackend:
    """state.json and state.lock in one private folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(os.path.abspath(folder))
        self.url = self.folder.as_uri()
        self._state, self._lock = folder / STATE, folder / LOCK

    def _os_error(self, exc: OSError, doing: str) -> StateError:
        return StateError(f"cannot {doing} the state at {self.url}: {exc.strerror or exc}",
                          hint="the state folder must be a writable folder")

    def _make_folder(self) -> None:
        try:
            private_folder(self.folder)
        except OSError as exc:
            raise self._os_error(exc, "create") from None

    @contextlib.contextmanager
    def _briefly(self, action: str) -> Iterator[None]:
        """A short flock that makes read-compare-change steps whole between processes."""
        self._make_folder()
        try:
            with held(self.folder / "state.write-lock", action=action, timeout=10):
                yield
        except Busy as busy:
            raise StateError(f"the state at {self.url} has been busy for 10 s"
                             + (f" ({busy.holder})" if busy.holder else ""),
                             hint="try again; if it stays busy, find the process holding "
                                  f"{self.folder / 'state.write-lock'}") from None

    def read(self) -> tuple[bytes, str] | None:
        try:
            data = self._state.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._os_error(exc, "read") from None
        return data, hashlib.sha256(data).hexdigest()

    def write(self, data: bytes, version: str | None) -> str:
        with self._briefly("write"):
            found = self.read()
            current = found[1] if found else None
            if current != version:
                raise StateConflict(f"the state at {self.url} is not the version read "
                                    f"({'none' if version is None else version[:12]}), it is "
                                    f"{'none' if current is None else current[:12]}")
            try:
                atomic_write(self._state, data, mode=0o600)
            except OSError as exc:
                raise self._os_error(exc, "write") from None
        return hashlib.sha256(data).hexdigest()

    def _read_lock(self) -> tuple[bool, LockInfo | None]:
        """(exists, its note or None when unreadable)."""
        try:
            data = self._lock.read_bytes()
        except FileNotFoundError:
            return False, None
        except OSError:
            return True, None
        return True, parse_lock(data)

    def acquire(self, info: LockInfo) -> None:
        """The note is written whole to a temporary file, then linked in as state.lock: the link
        fails if the lock exists (as O_CREAT|O_EXCL does), and nobody sees a half-written note."""
        self._make_folder()
        tmp = self.folder / f".{LOCK}.{info.id}"
        try:
            atomic_write(tmp, info.to_bytes(), mode=0o600)
            try:
                os.link(tmp, self._lock)
            except FileExistsError:
                raise refused(self.url, self._read_lock()) from None
            except OSError:  # a file system without hard links
                self._exclusive_create(info)
        except OSError as exc:
            raise self._os_error(exc, "lock") from None
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()

    def _exclusive_create(self, info: LockInfo) -> None:
        try:
            fd = os.open(self._lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            raise refused(self.url, self._read_lock()) from None
        with os.fdopen(fd, "wb") as out:
            out.write(info.to_bytes())
            out.flush()
            os.fsync(out.fileno())

    def release(self, lock_id: str) -> None:
        with self._briefly("unlock"):
            exists, holder = self._read_lock()
            if exists and holder is not None and holder.id == lock_id:
                self._lock.unlink(missing_ok=True)

    def holder(self) -> LockInfo | None:
        return self._read_lock()[1]

    def force_release(self, lock_id: str) -> LockInfo:
        with self._briefly("force-unlock"):
            exists, holder = self._read_lock()
            if not exists:
                raise not_held(self.url)
            if (holder.id if holder else UNREADABLE) != lock_id:
                raise other_id(self.url, holder, lock_id)
            self._lock.unlink(missing_ok=True)
        return holder or LockInfo.unreadable()


