"""The project file, `orchestrate.yaml`: the root of a repository of cluster and experiment files
that `plan` and `apply` manage together, and where their state and tokens live.

    find_project(start) -> Path | None      walking up from `start` (a folder or a file)
    load_project(path) -> ProjectSpec       validated against schemas/project.schema.json
    ProjectSpec.files() -> [Path]           the include globs, minus the exclude globs, sorted

ORCHESTRATE_STATE and ORCHESTRATE_SECRETS override the file's `state` and `secrets` (a CI job
points the same files at its own bucket without editing them).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import Problem, SpecError
from ..yamlload import Document, load_file
from .schema import schema_problems

PROJECT_FILE = "orchestrate.yaml"
STATE_ENV = "ORCHESTRATE_STATE"
SECRETS_ENV = "ORCHESTRATE_SECRETS"


@dataclass(frozen=True)
class ProjectSpec:
    name: str
    file: Path                      # the project file, absolute
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    state: str                      # "" = a folder under ORCHESTRATE_HOME
    secrets: str                    # "file" | env://PREFIX | aws-sm://PREFIX
    source: Document | None = None

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


def find_project(start: Path) -> Path | None:
    """The nearest orchestrate.yaml in `start` (a folder, or a file's folder) or above it."""
    folder = start.resolve()
    if not folder.is_dir():
        folder = folder.parent
    for candidate in (folder, *folder.parents):
        if (candidate / PROJECT_FILE).is_file():
            return candidate / PROJECT_FILE
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
                       source=doc)


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
