"""Local paths written in spec files, looked at without ever raising: a name too long for the
file system, a NUL byte or `~nobody` is simply a path that is not there."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def local(base: Path, value: str) -> Path:
    """`value` relative to `base` (the spec file's folder), `~` expanded, made absolute."""
    try:
        path = Path(value).expanduser()
    except RuntimeError:  # ~user with no such user: kept as written
        path = Path(value)
    try:
        return (base / path).resolve()
    except (OSError, ValueError, RuntimeError):
        return base / path


def holds(path: Path, test: Callable[[Path], bool] = Path.exists) -> bool:
    """`test(path)` (exists, is_dir, is_file), False where the path cannot even be looked at."""
    try:
        return test(path)
    except (OSError, ValueError):
        return False
