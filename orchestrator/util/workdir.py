"""What Ray ships as a job's `working_dir`: the files, their size, and a digest of them.

Ray zips the folder with every job (uncompressed, `ZIP_STORED`) and refuses a zip of
`RAY_max_grpc_message_size` (512 MiB) or more. It leaves out what matches the runtime_env's
`excludes` (gitignore patterns relative to the folder) and, in each folder it walks, what that
folder's `.gitignore` and `.rayignore` list. `scan` walks the same way, with the same pattern
syntax, so the digest covers exactly what is uploaded and the size is known before Ray zips it
(tests/util/test_workdir.py compares the list with Ray's own zip).

The same walk refuses what must not leave this machine (`private`): files that by their name or
their first bytes hold a credential, and, in a working_dir others may read, files open to their
owner only (not folders: tools make 0700 folders of files meant to be read). What it finds is a
SpecError naming each, with how to leave it out: the Job API's upload and a RayJob's package
store both ship what `scan` lists, so neither gets it.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import Problem, SpecError

# Never part of a job's code: version control, caches, virtualenvs. Added to the user's list.
DEFAULT_EXCLUDES = (".git", "__pycache__", "*.pyc", ".mypy_cache", ".pytest_cache",
                    ".ruff_cache", ".ipynb_checkpoints", ".venv")
WARN_BYTES = 100 * 1024 * 1024  # larger than any code folder; most likely data or results
_ZIP_ENTRY = 30 + 46  # a stored zip entry's local header plus its central directory record
_ZIP_END = 22

# Files that hold a credential by what they are. Templates (`.env.example`) are the committed
# form of a dotenv file and hold none; an SSH key's `.pub` is public; a PEM certificate (a CA
# bundle a job needs) is public, so `*.pem` is judged by its content (_PRIVATE_KEY), not its name.
SECRET_NAMES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("a dotenv file, where an application's passwords and keys usually are",
     (".env", ".env.*", "!.env.example", "!.env.sample", "!.env.template")),
    ("an SSH private key", ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk",
                            "id_ed25519_sk")),
    ("a private key, key store or password database", ("*.key", "*.p12", "*.pfx", "*.kdbx")),
    ("a password file (netrc, PostgreSQL's, git's credential store, the AWS CLI's keys)",
     (".netrc", "_netrc", ".pgpass", ".git-credentials", "**/.aws/credentials")),
)
# Package index settings hold a token only when one is written in them.
_TOKEN_LINES = {".pypirc": re.compile(rb"^\s*password\s*[:=]", re.M),
                ".npmrc": re.compile(rb"_auth(Token)?\s*=|_password\s*=")}
# A PEM private key, also inside JSON (a Google service account's key file, its newlines `\n`):
# the markers alone (code that looks for keys) are not one, the base64 body is.
_PRIVATE_KEY = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----"
                          rb"[A-Za-z0-9+/=\s\\:,.-]{64,}?-----END ")
_SNIFF_BYTES = 64 * 1024  # key files are a few KiB; larger files are data, never read here


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


def scan(root: Path, excludes: tuple[str, ...], include_gitignore: bool = True, *,
         refuse_private: bool = True,
         problem: Callable[[str, str], Problem] | None = None) -> WorkingDir:
    """The files Ray would upload from `root` with these `excludes`, as Ray walks them.
    SpecError when one of them is `private` (unless not `refuse_private`: orchestrate's own
    package); `problem(message, hint)` places each refusal (the experiment's `working_dir`
    field), by default at the folder itself."""
    root = root.absolute()
    found: list[tuple[str, int]] = []
    refused: dict[str, tuple[str, str]] = {}   # path -> (why, how else to ship it)
    rules: list[Callable[[Path], bool]] = [_matcher(root, list(excludes))]
    shared = bool(root.stat().st_mode & 0o077)   # else its modes say nothing of one file

    def walk(path: Path) -> None:
        added = _ignore_files(path, include_gitignore) if path.is_dir() else []
        rules.extend(added)
        if not any(rule(path) for rule in rules):
            if path.is_dir():
                for child in path.iterdir():
                    walk(child)
            elif path.is_file():
                relative = path.relative_to(root).as_posix()
                why = private(path, relative, shared) if refuse_private else None
                if why is not None:
                    refused[relative] = why
                else:
                    found.append((relative, path.stat().st_size))
        del rules[len(rules) - len(added):]

    walk(root)
    if refused:
        place = problem or (lambda message, hint: Problem(str(root), message, field="working_dir",
                                                          hint=hint))
        raise SpecError([place(
            f"{name} would be shipped with the job: {reason}",
            f'leave it out: add "/{name}" to runtime_env.excludes, or list it in a .gitignore '
            f"or .rayignore{remedy}") for name, (reason, remedy) in sorted(refused.items())])
    return WorkingDir(root, excludes, tuple(sorted(found)))


def private(path: Path, relative: str, shared: bool) -> tuple[str, str] | None:
    """(why, how else to ship it) when the file or folder at `path` must not leave this
    machine: a credential by name or content, or, in a working_dir others may read (`shared`),
    a file its owner made private (no access for group and others)."""
    if not (path.is_file() or path.is_dir()):   # a dangling link, a socket: never shipped
        return None
    mode = path.stat().st_mode
    # Files only: a folder made 0700 says little of its files (tempfile.mkdtemp, `mktemp -d`
    # and pytest make every folder so), while a 0600 file is one its owner kept to themselves.
    if shared and path.is_file() and not mode & 0o077:
        return (f"a file open to its owner only (mode {mode & 0o777:04o}) in a working_dir that "
                "is not: its owner made it private",
                f"; if it is meant to ship, let its group read it "
                f"(chmod g+r {shlex.quote(relative)})")
    if not path.is_file():
        return None
    for what, patterns in SECRET_NAMES:
        if _names(patterns)(relative):
            remedy = ("; the job's secrets go in runtime_env.env_vars as {from_env: VAR}"
                      if what.startswith("a dotenv") else "")
            return f"its name is that of {what}", remedy
    if path.stat().st_size <= _SNIFF_BYTES:
        try:
            head = path.read_bytes()
        except OSError:
            return None
        marker = _TOKEN_LINES.get(path.name)
        if marker is not None and marker.search(head):
            return f"a {path.name} with a password or token in it", ""
        if b"PRIVATE KEY" in head and _PRIVATE_KEY.search(head):
            return "it holds a private key (a PEM block)", ""
    return None


@functools.cache
def _names(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    import pathspec

    return pathspec.PathSpec.from_lines("gitignore", patterns).match_file


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
