"""Files that must never be seen half-written, folders that must stay private, JSON state
files that a crash, a disk or a person may have damaged, and folders filled by someone else
(an archive copied from a cluster's head) read without following their links."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: Path, data: str | bytes, *, mode: int = 0o600) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over `path`; private
    unless `mode` says otherwise (a folder it makes is 0700)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
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


def private_folder(path: Path) -> Path:
    """`path` created if need be, mode 0700 (its missing parents too: `mkdir(parents=True)`
    would make those with the umask's mode). Raises OSError."""
    missing = []
    folder = path
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for each in reversed(missing):
        each.mkdir(mode=0o700, exist_ok=True)
        os.chmod(each, 0o700)
    os.chmod(path, 0o700)
    return path


class Refused(OSError):
    """A path not read or written into: a symbolic link, not a regular file or folder, or a
    folder another user owns or may write (`str()` says which and why)."""


def open_below(root: Path, path: Path) -> int:
    """A descriptor of the regular file `path`, opened without following a symbolic link
    anywhere below `root` (each folder with O_NOFOLLOW, from the one before). Refused for a
    link or anything but folders and a regular file on the way; OSError otherwise."""
    parts = path.relative_to(root).parts
    if not parts or any(part in (".", "..") for part in parts):
        raise Refused(f"{path} is not a file below {root}")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            # O_NONBLOCK: a FIFO in the file's place opens at once, to be refused below
            flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                opened = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                where = root.joinpath(*parts[:i + 1])
                raise Refused(f"{where} is a symbolic link" if os.path.islink(where)
                              else f"{where} is not a folder") from None
            os.close(fd)
            fd = opened
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Refused(f"{path} is not a regular file")
        found, fd = fd, -1
        return found
    finally:
        if fd >= 0:
            os.close(fd)


def read_below(root: Path, path: Path) -> bytes:
    """The bytes of `path`, read as `open_below` opens it."""
    with os.fdopen(open_below(root, path), "rb") as source:
        return source.read()


def private_below(root: Path, folder: Path) -> Path:
    """`folder` and every folder between `root` and it made 0700, those missing created:
    Refused if one of them is a symbolic link or not a folder, another user's, or writable by
    group or others (what is written there could be read, or sent elsewhere, by them)."""
    path = root
    for part in folder.relative_to(root).parts:
        path = path / part
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            path.mkdir(mode=0o700)
            info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            raise Refused(f"{path} is a symbolic link")
        if not stat.S_ISDIR(info.st_mode):
            raise Refused(f"{path} is not a folder")
        if info.st_uid != os.getuid():
            raise Refused(f"{path} belongs to another user")
        if info.st_mode & 0o022:
            raise Refused(f"{path} is writable by other users")
        os.chmod(path, 0o700)   # a real folder of ours, in one only we may write
    return folder


def read_json(path: Path, problem_of: Callable[[Any], str | None]) -> tuple[Any, str | None]:
    """(data, None) for a sound file; (None, None) when it does not exist; (None, why) when it
    cannot be read or `problem_of(data)` finds it damaged."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"unreadable: {getattr(exc, 'strerror', None) or exc}"
    problem = problem_of(data)
    if problem:
        return None, f"corrupted: {problem}"
    return data, None


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a text file ("" when it cannot be read)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
