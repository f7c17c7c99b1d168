"""The project file, `orchestrate.yaml`: the root of a repository of cluster and experiment files
that `plan` and `apply` manage together, and where their state and tokens live.

    find_project(start) -> Path | None      walking up from `start` (a folder or a file), as
                                            far as a folder that is safe to take a project from
    load_project(path) -> ProjectSpec       validated against schemas/project.schema.json
    ProjectSpec.files() -> [Path]           the include globs, minus the exclude globs, sorted

ORCHESTRATE_STATE and ORCHESTRATE_SECRETS override the file's `state` and `secrets` (a CI job
points the same files at its own bucket without editing them).
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import Problem, SpecError
from ..yamlload import Document, load_file
from .kinds import PROJECT_FILE
from .schema import schema_problems

STATE_ENV = "ORCHESTRATE_STATE"
SECRETS_ENV = "ORCHESTRATE_SECRETS"


@dataclass(frozen=True)
class Budget:
    """The project's cap on its clusters' list price, USD per hour at max_workers (None: no cap)."""

    max_hourly: float | None = None          # all clusters together
    max_cluster_hourly: float | None = None  # any one cluster
    line: int | None = None                  # of `budget:` in the project file


@dataclass(frozen=True)
class ProjectSpec:
    name: str
    file: Path                      # the project file, absolute
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    state: str                      # "" = a folder under ORCHESTRATE_HOME
    secrets: str                    # "file" | env://PREFIX | aws-sm://PREFIX
    source: Document | None = None
    budget: Budget | None = None

    @property
    def root(self) -> Path:
        return self.file.parent

    def files(self) -> list[Path]:
        """The project's cluster and experiment files: absolute, distinct, sorted."""
        excluded = {path.resolve() for pattern in self.exclude for path in self.root.glob(pattern)}
        found = {path.resolve() for pattern in self.include for path in self.root.glob(pattern)
                 if path.is_file() and path.resolve() != self.file}
        return sorted(found - excluded)

    def relative(self, path: Path) -> str:
        """`path` as people see it in a plan: relative to the project's root when inside it."""
        try:  # the project's files are resolved already
            return (path if path.is_absolute() else path.resolve()).relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def contains(self, path: Path) -> bool:
        return path.resolve() in set(self.files())


def unsafe(path: Path) -> str | None:
    """Why a project file found at `path` (a folder, or the file) could have been put there by
    someone else, or None: owned by another user than this one or root, or writable by others
    (as git's `safe.directory`); a folder writable by its group only when the group is this
    user's own (a user private group, as umask 002 makes)."""
    try:
        info = path.stat()
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    if info.st_uid not in (os.geteuid(), 0):
        return f"it is owned by {_user(info.st_uid)}, not by you or root"
    mode = stat.S_IMODE(info.st_mode)
    if mode & stat.S_IWOTH:
        return f"anyone may write to it (mode {mode:04o})"
    if mode & stat.S_IWGRP and not _own_group(info.st_gid):
        return f"its group {_group(info.st_gid)} may write to it (mode {mode:04o})"
    return None


def _user(uid: int) -> str:
    import pwd

    try:
        return f"user {pwd.getpwuid(uid).pw_name} ({uid})"
    except KeyError:
        return f"user {uid}"


def _group(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _own_group(gid: int) -> bool:
    """This user's private group: named as the user, with no other member."""
    import grp
    import pwd

    try:
        user, group = pwd.getpwuid(os.geteuid()), grp.getgrgid(gid)
    except KeyError:
        return False
    return gid == user.pw_gid and group.gr_name == user.pw_name and \
        set(group.gr_mem) <= {user.pw_name}


def find_project(start: Path) -> Path | None:
    """The nearest orchestrate.yaml in `start` (a folder, or a file's folder) or above it. The
    search stops at the repository's root (a folder holding .git) and at a folder someone else
    could have written (`unsafe`): a project file there is refused (SpecError naming it), since
    whoever wrote it would choose the state, the token references and the files of every
    command run below it."""
    folder = start.resolve()
    if not folder.is_dir():
        folder = folder.parent
    for candidate in (folder, *folder.parents):
        found = candidate / PROJECT_FILE
        why = unsafe(candidate)
        if why is None and found.is_file():
            why = unsafe(found)
            where = found
        else:
            where = candidate
        if why is not None:
            if found.is_file():
                raise SpecError([Problem(str(found), f"not used: {where} is not safe: {why}",
                                         hint="keep the project in a folder only you can write "
                                              "(`chmod go-w`), or pass --project FILE to use it "
                                              "on purpose")])
            return None
        if found.is_file():
            return found
        if (candidate / ".git").exists():
            return None  # the repository's root: a project above it is another one
    return None


def load_project(path: str | Path) -> ProjectSpec:
    path = Path(path)
    doc = load_file(path)
    problems = schema_problems(doc, "project")
    if problems:
        raise SpecError(problems)
    data = doc.data
    return ProjectSpec(name=data["project"], file=path.resolve(), include=tuple(data["include"]),
                       exclude=tuple(data.get("exclude") or ()),
                       state=os.environ.get(STATE_ENV) or data.get("state") or "",
                       secrets=os.environ.get(SECRETS_ENV) or data.get("secrets") or "file",
                       source=doc, budget=_budget(doc))


def _budget(doc: Document) -> Budget | None:
    given = doc.data.get("budget")
    if not given:
        return None
    return Budget(max_hourly=given.get("max_hourly"),
                  max_cluster_hourly=given.get("max_cluster_hourly"),
                  line=doc.line_of(("budget",)))


def project_for(explicit: str | None, start: Path) -> ProjectSpec:
    """--project FILE, else the orchestrate.yaml found walking up from `start`; SpecError if
    there is none (a plan needs to know the whole project, or at least its state)."""
    if explicit:
        return load_project(explicit)
    found = find_project(start)
    if found is None:
        raise SpecError([Problem(str(start), f"no {PROJECT_FILE} here or in any folder above",
                                 hint=f"create {PROJECT_FILE} at the root of the repository "
                                      f"(project, include, state), or pass --project FILE")])
    return load_project(found)
