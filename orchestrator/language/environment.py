"""The experiment's `runtime_env:` beyond `excludes`: what the job installs (`pip:` or `uv:`), its
environment variables (plain, or `{from_env: NAME}` taken from the submitting machine's
environment at submission), and Ray's `config`. Checked at load time, resolved for rendering.

Requirements are Ray's own list: PEP 508 strings, URLs (`git+https://...`, `pkg @ https://...`),
pip option lines (`--index-url ...`), or local paths (a wheel, an sdist, a project folder). A
local path is relative to the file that names it and must reach the job: inside the working_dir
it becomes `${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}/<path>` (Ray sets it where it unpacked the
working_dir on each node; pip expands it), outside it is an absolute path, which only the embedded Ray
can open. Each local path gets a comment with its content's digest (render.experiment, from the
files shipped, for a path inside the working_dir), so a rebuilt wheel gives Ray's pip cache
(keyed by the list's text) a new key. `-r FILE` lines are read here, relative to the file that
names them; other pip options that name a local path are refused (they would not reach the job).

A requirements file (named by `pip:`/`uv:` or by `-r`) is read only if it is a regular file of at
most `MAX_REQUIREMENTS_FILE` bytes inside the experiment file's folder or its working_dir (symlinks
resolved first): `/proc/self/environ` or `/dev/zero` are refused unread, and an error names the
file, never a line of one that was refused.
"""
from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..contract import CONFIG_ENV, SECRET_NAMES_ENV
from ..errors import Problem
from ..yamlload import Document
from .paths import holds, local

INSTALLERS = ("pip", "uv")
INCLUDES = ("-r", "--requirement")
PATH_OPTIONS = ("-c", "--constraint", "-e", "--editable", "-f", "--find-links")
IN_WORKING_DIR = "${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}"
RESERVED = (CONFIG_ENV, SECRET_NAMES_ENV)
ARCHIVES = (".whl", ".tar.gz", ".tgz", ".zip", ".tar.bz2")
MAX_REQUIREMENTS_FILE = 1024 * 1024   # bytes: a requirements file is read whole, at validation


@dataclass(frozen=True)
class Requirement:
    text: str                 # as written
    file: str                 # where it was written (the experiment or a requirements file)
    line: int | None
    field: str
    local: Path | None = None  # a local path, resolved


@dataclass(frozen=True)
class Environment:
    """What the job's runtime_env gets from the experiment; secrets by name only."""
    installer: str | None = None                              # "pip", "uv" or None
    packages: tuple[str, ...] = ()                            # as Ray gets them
    env_vars: dict[str, str] = field(default_factory=dict)    # plain values
    secrets: dict[str, str] = field(default_factory=dict)     # job's variable -> submitter's
    config: dict[str, Any] = field(default_factory=dict)      # Ray's RuntimeEnvConfig

    def public(self) -> dict[str, Any]:
        """Everything that identifies the environment, secret values aside (it has none): what
        the submission id and a plan's content hash cover. Empty for an experiment without one."""
        shown: dict[str, Any] = {}
        if self.installer:
            shown[self.installer] = list(self.packages)
        if self.env_vars:
            shown["env_vars"] = dict(sorted(self.env_vars.items()))
        if self.secrets:
            shown["secrets"] = dict(sorted(self.secrets.items()))
        if self.config:
            shown["config"] = dict(sorted(self.config.items()))
        return shown


def section(data: dict[str, Any]) -> dict[str, Any]:
    value = data.get("runtime_env") or {}
    return value if isinstance(value, dict) else {}


def requirements(doc: Document, base: Path,
                 working_dir: Path) -> tuple[list[Requirement], list[Problem]]:
    """The requirement lines of `pip:` or `uv:` (a list, or a requirements file's lines), with
    where each was written; problems for a requirements file that cannot be read, or may not
    be (outside `base`, the experiment file's folder, and `working_dir`)."""
    env = section(doc.data)
    key = next((k for k in INSTALLERS if k in env), None)
    if key is None:
        return [], []
    value = env[key]
    roots = (_resolved(base), _resolved(working_dir))
    if isinstance(value, list):
        listed = [Requirement(_uncommented(str(text)), doc.file,
                              doc.line_of(("runtime_env", key, i)), f"runtime_env.{key}[{i}]")
                  for i, text in enumerate(value)]
        return _included(listed, base, set(), roots)
    where = Requirement(str(value), doc.file, doc.line_of(("runtime_env", key)), f"runtime_env.{key}")
    found, problems = _read(local(base, str(value)), where, base, set(), roots)
    if not found and not problems:
        problems = [doc.problem(("runtime_env", key), f"the requirements file {value!r} lists "
                                f"no requirements")]
    return found, problems


def _uncommented(text: str) -> str:
    return text.split(" #", maxsplit=1)[0].strip()   # pip's and Ray's comment rule


def _option(text: str) -> tuple[str, str]:
    """A pip option line's option and argument: `-r x`, `-rx`, `--requirement=x`, ..."""
    if text.startswith("--"):
        option, _, argument = text.replace("=", " ", 1).partition(" ")
        return option, argument.strip()
    return text[:2], text[2:].strip()


def _read(path: Path, named_by: Requirement, base: Path, seen: set[Path],
          roots: tuple[Path, ...]) -> tuple[list[Requirement], list[Problem]]:
    """The requirement lines of the requirements file `path` (named by `named_by`, relative to
    `base`), its `-r` files read in their place; only a small regular file under `roots`."""
    text = _option(named_by.text)[1] if named_by.text.startswith("-") else named_by.text
    reason = _unreadable(path, base, roots)
    if reason is None:
        try:
            lines = path.read_bytes().decode("utf-8").splitlines()
        except UnicodeDecodeError:
            reason = "is not UTF-8 text"
        except OSError as exc:   # the file changed since it was looked at
            reason = f"cannot be read ({exc.strerror or type(exc).__name__})"
    if reason is not None:
        return [], [Problem(named_by.file, f"the requirements file {text!r} {reason}",
                            line=named_by.line, field=named_by.field)]
    seen = seen | {path}
    found = [Requirement(_uncommented(raw), str(path), number, named_by.field)
             for number, raw in enumerate(lines, 1)
             if _uncommented(raw) and not raw.strip().startswith("#")]
    return _included(found, path.parent, seen, roots)


def _unreadable(path: Path, base: Path, roots: tuple[Path, ...]) -> str | None:
    """Why the requirements file `path` (resolved; named relative to `base`) is not read, or
    None: a regular file of at most MAX_REQUIREMENTS_FILE bytes inside one of `roots`."""
    if not any(_inside(path, root) for root in roots):
        folders = f"({roots[0]})" if roots[0] == roots[-1] else f"({roots[0]}) and its " \
            f"working_dir ({roots[-1]})"
        return (f"is outside the experiment's folder {folders}; a requirements file must be "
                f"inside one of them")
    try:
        info = path.stat()
    except (OSError, ValueError):
        return f"does not exist (relative paths start at {base})"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_size > MAX_REQUIREMENTS_FILE:
        return (f"is larger than {MAX_REQUIREMENTS_FILE // (1024 * 1024)} MiB (requirements "
                f"files are read whole)")
    return None


def _resolved(folder: Path) -> Path:
    try:
        return folder.resolve()
    except (OSError, RuntimeError):
        return folder


def _included(found: list[Requirement], base: Path, seen: set[Path],
              roots: tuple[Path, ...]) -> tuple[list[Requirement], list[Problem]]:
    """`found` with each `-r FILE` line replaced by that file's lines."""
    result: list[Requirement] = []
    problems: list[Problem] = []
    for req in found:
        option, argument = _option(req.text) if req.text.startswith("-") else ("", "")
        if option not in INCLUDES:
            result.append(req)
            continue
        path = local(base, argument)
        if path in seen:
            problems.append(Problem(req.file, f"{req.text!r} includes a file already being read",
                                    line=req.line, field=req.field))
            continue
        more, wrong = _read(path, req, base, seen, roots)
        result += more
        problems += wrong
    return result, problems


def _classify(req: Requirement, base: Path) -> tuple[Requirement, str | None]:
    """`req` with its local path resolved, or the reason it is not a requirement."""
    text = req.text
    if text.startswith("-"):   # a pip option line, passed as written unless it names a path
        option, argument = _option(text)
        if option in PATH_OPTIONS and argument and "://" not in argument \
                and not argument.startswith("git+"):
            return req, (f"{text!r}: a local path in a pip option does not reach the job's "
                         f"nodes; name the wheel, sdist or folder itself as a requirement")
        return req, None
    if "://" in text or text.startswith("git+"):
        return req, None        # a URL
    if text.endswith(ARCHIVES):  # PEP 508 would take `lib-0.1.tar.gz` for a package name
        return _local(req, base)
    from packaging.requirements import InvalidRequirement
    from packaging.requirements import Requirement as Pep508

    try:
        Pep508(text)
        return req, None
    except InvalidRequirement as exc:
        error = str(exc).splitlines()[0]
    if not ("/" in text or "\\" in text or text.startswith(".")):
        fixed = text.replace("=", "==", 1) if "=" in text and "==" not in text else None
        if fixed and _parses(fixed):
            error += f"; did you mean {fixed!r}?"
        return req, f"not a requirement: {text!r} ({error})"
    return _local(req, base)


def _local(req: Requirement, base: Path) -> tuple[Requirement, str | None]:
    path = local(base, req.text)
    if not holds(path):
        return req, f"{req.text!r}: no such file or folder (relative paths start at {base})"
    return Requirement(req.text, req.file, req.line, req.field, local=path), None


PACKAGE_FILES = ("pyproject.toml", "setup.py", "setup.cfg")


def _parses(text: str) -> bool:
    from packaging.requirements import InvalidRequirement
    from packaging.requirements import Requirement as Pep508

    try:
        Pep508(text)
    except InvalidRequirement:
        return False
    return True


def problems(doc: Document, base: Path, working_dir: Path, remote: bool) -> list[Problem]:
    """What is wrong with the runtime_env section; `remote`: the job goes to a cluster (a local
    path outside the working_dir cannot reach it)."""
    env = section(doc.data)
    found: list[Problem] = []
    if all(k in env for k in INSTALLERS):
        found.append(doc.problem(("runtime_env", "uv"), "give either 'pip' or 'uv', not both"))
    reqs, found_here = requirements(doc, base, working_dir)
    found += found_here
    for req in reqs:
        resolved, error = _classify(req, Path(req.file).parent if req.file != doc.file else base)
        if error is None and resolved.local is not None and remote \
                and not _inside(resolved.local, working_dir):
            error = (f"{req.text!r} is outside the working_dir ({working_dir}), so it does not "
                     f"reach the cluster; put it inside the working_dir")
        elif error is None and resolved.local is not None and resolved.local.is_dir() \
                and not _inside(resolved.local, working_dir) \
                and not any((resolved.local / name).is_file() for name in PACKAGE_FILES):
            # pip could not install it, and its digest would read every file below it
            error = (f"{req.text!r} is a folder without {' or '.join(PACKAGE_FILES)}: not a "
                     f"package pip can install")
        if error:
            found.append(Problem(req.file, error, line=req.line, field=req.field))
    for name in env.get("env_vars") or {}:
        if name in RESERVED:
            found.append(doc.problem(("runtime_env", "env_vars", name),
                                     f"{name} is orchestrate's own variable"))
    return found


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def resolve(doc: Document, base: Path, working_dir: Path) -> Environment:
    """The experiment's environment as the job gets it (the file was checked by `problems`)."""
    env = section(doc.data)
    reqs, _ = requirements(doc, base, working_dir)
    packages = []
    for req in reqs:
        resolved, _error = _classify(req, Path(req.file).parent if req.file != doc.file else base)
        packages.append(_as_shipped(resolved, working_dir))
    plain, secrets = {}, {}
    for name, value in (env.get("env_vars") or {}).items():
        if isinstance(value, dict):
            secrets[name] = str(value["from_env"])
        else:
            plain[name] = str(value)
    return Environment(installer=next((k for k in INSTALLERS if k in env), None),
                       packages=tuple(packages), env_vars=plain, secrets=secrets,
                       config=dict(env.get("config") or {}))


def _as_shipped(req: Requirement, working_dir: Path) -> str:
    """A local path as the job's nodes find it: inside the working_dir under Ray's variable
    (its digest comes at render time, from the files shipped), else absolute with a digest."""
    if req.local is None:
        return req.text
    if _inside(req.local, working_dir):
        relative = req.local.relative_to(working_dir).as_posix()
        return IN_WORKING_DIR if relative == "." else f"{IN_WORKING_DIR}/{relative}"
    return f"{req.local} # sha256:{_digest(req.local)[:16]}"


def _digest(path: Path) -> str:
    """sha256 of a file, or of a folder's files as pip would build them (without the caches
    and virtualenvs a working_dir never ships either)."""
    from ..util.workdir import DEFAULT_EXCLUDES

    digest = hashlib.sha256()
    if path.is_file():
        digest.update(path.read_bytes())
        return digest.hexdigest()
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in DEFAULT_EXCLUDES)
        for name in sorted(files):
            if name.endswith(".pyc"):
                continue
            item = Path(root, name)
            digest.update(str(item.relative_to(path)).encode() + b"\0")
            try:
                digest.update(item.read_bytes())
            except OSError:
                digest.update(b"\0unreadable")
    return digest.hexdigest()


def unset(doc: Document, environment: Environment,
          environ: os._Environ[str] | dict[str, str]) -> list[Problem]:
    """`from_env` variables that the submitting environment does not set."""
    return [doc.problem(("runtime_env", "env_vars", name, "from_env"),
                        f"{source} is not set in this environment",
                        f"set it before `orchestrate run` (the job's {name} is taken from it)")
            for name, source in environment.secrets.items() if source not in environ]
