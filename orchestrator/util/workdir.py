"""What Ray ships as a job's `working_dir`: the files, their size, and a digest of them.

Ray zips the folder with every job (uncompressed, `ZIP_STORED`) and refuses a zip of
`RAY_max_grpc_message_size` (512 MiB) or more. It leaves out what matches the runtime_env's
`excludes` (gitignore patterns relative to the folder) and, in each folder it walks, what that
folder's `.gitignore` and `.rayignore` list. `scan` walks the same way, with the same pattern
syntax, so the digest covers exactly what is uploaded and the size is known before Ray zips it
(tests/util/test_workdir.py compares the list with Ray's own zip).
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Never part of a job's code: version control, caches, virtualenvs. Added to the user's list.
DEFAULT_EXCLUDES = (".git", "__pycache__", "*.pyc", ".mypy_cache", ".pytest_cache",
                    ".ruff_cache", ".ipynb_checkpoints", ".venv")
WARN_BYTES = 100 * 1024 * 1024  # larger than any code folder; most likely data or results
_ZIP_ENTRY = 30 + 46  # a stored zip entry's local header plus its central directory record
_ZIP_END = 22


def ray_limit() -> int:
    """Ray refuses a working_dir zip of this many bytes or more."""
    limit = os.environ.get("RAY_max_grpc_message_size")  # noqa: SIM112 - Ray's own name
    return int(limit) if limit and limit.isdigit() else 512 * 1024 * 1024


@dataclass(frozen=True)
class WorkingDir:
    root: Path
    excludes: tuple[str, ...]              # what the runtime_env's `excludes` gets
    files: tuple[tuple[str, int], ...]     # (path relative to root, bytes), sorted

    @property
    def size(self) -> int:
        return sum(size for _, size in self.files)

    @property
    def zip_size(self) -> int:
        """The size of Ray's zip of these files, within a few bytes per folder."""
        return self.size + sum(_ZIP_ENTRY + 2 * len(name.encode()) for name, _ in self.files) + \
            _ZIP_END

    def largest(self, count: int = 3) -> list[tuple[str, int]]:
        """The biggest top-level entries (files, or folders with everything in them)."""
        totals: dict[str, int] = {}
        for name, size in self.files:
            top = name.split("/", 1)[0] + ("/" if "/" in name else "")
            totals[top] = totals.get(top, 0) + size
        return sorted(totals.items(), key=lambda item: -item[1])[:count]

    def under(self, prefix: str) -> WorkingDir:
        """The files at or below `prefix` (a path relative to root; "" or ".": all of them)."""
        prefix = prefix.strip("/")
        if prefix in ("", "."):
            return self
        files = tuple(f for f in self.files if f[0] == prefix or f[0].startswith(prefix + "/"))
        return WorkingDir(self.root, self.excludes, files)

    def digest(self) -> str:
        """sha256 over the shipped files' names and contents."""
        digest = hashlib.sha256()
        for name, _ in self.files:
            digest.update(name.encode() + b"\0")
            try:
                with open(self.root / name, "rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(block)
            except OSError:
                digest.update(b"\0unreadable")
        return digest.hexdigest()


def excludes_for(root: Path, extra: list[str], inside: list[str]) -> tuple[str, ...]:
    """The defaults, the user's patterns, and each local folder in `inside` (e.g. the run's
    storage_path) that lies under `root`, as an anchored pattern."""
    anchored = []
    for folder in inside:
        try:
            relative = Path(folder).resolve().relative_to(root.resolve())
        except ValueError:
            continue
        if relative.parts:
            anchored.append(f"/{relative.as_posix()}/")
    return tuple(dict.fromkeys([*DEFAULT_EXCLUDES, *extra, *anchored]))


def scan(root: Path, excludes: tuple[str, ...], include_gitignore: bool = True) -> WorkingDir:
    """The files Ray would upload from `root` with these `excludes`, as Ray walks them."""
    root = root.absolute()
    found: list[tuple[str, int]] = []
    rules: list[Callable[[Path], bool]] = [_matcher(root, list(excludes))]

    def walk(path: Path) -> None:
        added = _ignore_files(path, include_gitignore) if path.is_dir() else []
        rules.extend(added)
        if not any(rule(path) for rule in rules):
            if path.is_dir():
                for child in path.iterdir():
                    walk(child)
            elif path.is_file():
                found.append((path.relative_to(root).as_posix(), path.stat().st_size))
        del rules[len(rules) - len(added):]

    walk(root)
    return WorkingDir(root, excludes, tuple(sorted(found)))


def _matcher(base: Path, patterns: list[str]) -> Callable[[Path], bool]:
    import pathspec

    spec = pathspec.PathSpec.from_lines("gitignore", patterns)
    return lambda path: spec.match_file(str(path.absolute().relative_to(base)))


def _ignore_files(folder: Path, include_gitignore: bool) -> list[Callable[[Path], bool]]:
    names = [".gitignore", ".rayignore"] if include_gitignore else [".rayignore"]
    rules = []
    for name in names:
        file = folder / name
        if file.is_file():
            rules.append(_matcher(folder.absolute(), file.read_text(errors="replace").splitlines()))
    return rules
