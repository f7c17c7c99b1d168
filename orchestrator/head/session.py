"""Ray's session logs on this head, read without trusting what another user could put there.

Ray 2.60 makes its temp folder (`/tmp/ray`), each session's folder and its `logs` 0777 without
the sticky bit: on a head shared with other users, any of them can point `session_latest`
elsewhere, put a folder or a link of theirs in place of `logs`, or add files. What the
archiver copies is therefore checked at each step, through file descriptors (each folder
opened relative to the last, O_NOFOLLOW, and checked once open), so what is checked is what
is read:

- the folders above the temp folder are this user's or root's, and not writable by others
  unless sticky (`/tmp`); the temp folder itself is a folder (not a link) of this user's;
- `session_latest` is a link to a `session_*` folder directly in the temp folder (or such a
  folder itself), and it and its `logs` are this user's folders;
- only regular files of this user, with a single link, whose names are Ray's log names
  (LOG_NAME) are listed and read; everything else is counted as left out.

Anything else on the path raises Refused and nothing is read. What remains while the temp
folder is writable by others (`Logs.shared`): another user can still move this user's own
files and folders around inside it (an older session's logs in place of the newest, a
log-named file of a job's unpacked working_dir). Nodes started with `--temp-dir` in a 0700
folder close that. Standard library only (this runs on the head).
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import PurePosixPath

# Ray's log names: raylet.out, gcs_server.err, dashboard.log, their rotations (.1, .2 ...),
# events/event_GCS.log, worker-<id>.out, job-driver-<id>.log, debug_state.txt
LOG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=-]*\.(?:log|out|err)(?:\.[0-9]+)?"
                      r"|debug_state[A-Za-z0-9_]*\.txt")
SESSION_NAME = re.compile(r"session_[A-Za-z0-9_.-]+")
FOLDER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=-]*")   # events, old, serve ...
MAX_DEPTH = 8            # Ray's logs are two folders deep at most
MAX_ENTRIES = 100_000    # a folder others can write to can be filled without end
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC   # a fifo does not block


class Refused(Exception):
    """The session's logs are not proven this user's: nothing was read."""


@dataclass(frozen=True)
class Entry:
    path: str        # relative to the logs folder, '/'-separated
    size: int
    mtime: float
    identity: tuple[int, int]   # (st_dev, st_ino): a file swapped after listing is not read


def _writable_by_others(mode: int) -> bool:
    return bool(mode & (stat.S_IWGRP | stat.S_IWOTH))


def _check_above(folder: str) -> None:
    """The folders from / down to `folder` (links resolved): each this user's or root's, and
    not writable by others unless sticky (then only their owners rename what is inside)."""
    path = PurePosixPath(os.path.realpath(folder))
    for above in [*reversed(path.parents), path]:
        found = os.lstat(above)
        if found.st_uid not in (0, os.getuid()):
            raise Refused(f"{above} belongs to another user (uid {found.st_uid})")
        if _writable_by_others(found.st_mode) and not found.st_mode & stat.S_ISVTX:
            raise Refused(f"{above} is writable by others (mode "
                          f"{stat.S_IMODE(found.st_mode):o}, not sticky)")


def _open_folder(name: str, at: int | None, what: str) -> tuple[int, os.stat_result]:
    try:
        fd = os.open(name, _FOLDER, dir_fd=at)
    except OSError as exc:
        raise Refused(f"{what} cannot be opened as a folder ({exc.strerror}; a link?)") from None
    found = os.fstat(fd)
    if found.st_uid != os.getuid():
        os.close(fd)
        raise Refused(f"{what} belongs to another user (uid {found.st_uid})")
    return fd, found


class Logs:
    """A session's logs folder, open and proven this user's (`open_logs`)."""

    def __init__(self, fd: int, path: str, shared: bool) -> None:
        self.fd, self.path, self.shared = fd, path, shared

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Logs:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def listing(self) -> tuple[list[Entry], int]:
        """Ray's log files of this user in the folder (see the module's docstring), and how
        many entries were left out: not Ray's logs, or not ours."""
        found: list[Entry] = []
        counts = {"seen": 0, "left": 0}
        self._walk(self.fd, "", found, counts)
        return found, counts["left"]

    def _walk(self, fd: int, prefix: str, found: list[Entry], counts: dict[str, int]) -> None:
        with os.scandir(fd) as entries:
            names = sorted(entry.name for entry in entries)
        for name in names:
            counts["seen"] += 1
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue   # gone meanwhile
            if counts["seen"] > MAX_ENTRIES:
                counts["left"] += 1
            elif stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() \
                    and FOLDER_NAME.fullmatch(name) and prefix.count("/") < MAX_DEPTH:
                self._folder(fd, name, info, prefix, found, counts)
            elif _is_log(name, info):
                found.append(Entry(prefix + name, info.st_size, info.st_mtime,
                                   (info.st_dev, info.st_ino)))
            else:
                counts["left"] += 1

    def _folder(self, fd: int, name: str, seen: os.stat_result, prefix: str,
                found: list[Entry], counts: dict[str, int]) -> None:
        try:
            inner = os.open(name, _FOLDER, dir_fd=fd)
        except OSError:
            counts["left"] += 1
            return
        try:
            opened = os.fstat(inner)
            if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
                counts["left"] += 1   # swapped between the look and the open
                return
            self.shared |= _writable_by_others(opened.st_mode)
            self._walk(inner, f"{prefix}{name}/", found, counts)
        finally:
            os.close(inner)

    def open(self, path: str, identity: tuple[int, int] | None = None) -> int:
        """A file descriptor on the log file at `path` (relative, as `listing` gives it),
        opened without following a link and checked once open; OSError if it is not (or no
        longer) one of Ray's log files of this user."""
        parts = path.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise OSError(f"{path}: not a path inside the logs folder")
        at, opened = self.fd, []
        try:
            for part in parts[:-1]:
                at = os.open(part, _FOLDER, dir_fd=at)
                opened.append(at)
                if os.fstat(at).st_uid != os.getuid():
                    raise OSError(f"{path}: a folder on the way is not this user's")
            fd = os.open(parts[-1], _FILE, dir_fd=at)
        finally:
            for folder in opened:
                os.close(folder)
        info = os.fstat(fd)
        if not _is_log(parts[-1], info) or (
                identity is not None and (info.st_dev, info.st_ino) != identity):
            os.close(fd)
            raise OSError(f"{path}: not the Ray log file of this user that was listed")
        return fd


def _is_log(name: str, info: os.stat_result) -> bool:
    return (stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and info.st_nlink == 1
            and LOG_NAME.fullmatch(name) is not None)


def open_logs(logs: str) -> Logs | None:
    """The folder `<temp folder>/<session>/logs` (`/tmp/ray/session_latest/logs`), open and
    proven this user's; None when there is no such session (Ray has not run here). Refused
    when something on the path is not as the module's docstring says."""
    path = PurePosixPath(os.path.abspath(logs))
    session, root = path.parent, path.parent.parent
    if not os.path.exists(path):   # nothing there (or a link to nothing): nothing to read
        return None
    _check_above(str(root.parent))
    root_fd, root_info = _open_folder(str(root), None, f"Ray's temp folder {root}")
    fds = [root_fd]
    try:
        try:
            target = os.readlink(session.name, dir_fd=root_fd)
        except OSError:
            name = session.name   # a folder, not a link
        else:
            name = PurePosixPath(target).name
            if str(PurePosixPath(target).parent) not in (".", str(root),
                                                          os.path.realpath(root)) \
                    or not SESSION_NAME.fullmatch(name) or name == session.name:
                raise Refused(f"{root / session.name} points to {target!r}, not to a "
                              f"session_* folder of {root}")
        session_fd, session_info = _open_folder(name, root_fd, f"{root / name}")
        fds.append(session_fd)
        logs_fd, logs_info = _open_folder(path.name, session_fd, f"{root / name / path.name}")
    finally:
        for fd in fds:
            os.close(fd)
    shared = any(_writable_by_others(info.st_mode)
                 for info in (root_info, session_info, logs_info))
    return Logs(logs_fd, str(root / name / path.name), shared)
