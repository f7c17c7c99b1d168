"""Files that must never be seen half-written, folders that must stay private, and JSON state
files that a crash, a disk or a person may have damaged."""
from __future__ import annotations

import contextlib
import json
import os
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
