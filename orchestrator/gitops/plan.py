"""The `plan` use case: the project's files (or the ones given), its state, a refresh of what
is live, and the planner's decision. Takes no lock and writes nothing.

    files, partial = files_for(project, paths)
    result = make_plan(project_state, PlanOptions(paths, refresh))   -> Planned
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import Problem, SpecError
from ..language.project import ProjectSpec
from ..state import cluster_key
from ..state.document import StateDoc
from .desired import Desired, read_desired
from .live import Live
from .planner import ProjectPlan, plan_project
from .store import ProjectState

SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class PlanOptions:
    paths: tuple[str, ...] = ()     # explicit files or folders: a partial plan
    refresh: bool = True


@dataclass(frozen=True)
class Planned:
    plan: ProjectPlan
    desired: dict[str, Desired]     # address -> what the file asks for
    doc: StateDoc
    files: list[str]                # the files planned, relative to the project's root


def files_for(project: ProjectSpec, paths: tuple[str, ...]) -> tuple[list[Path], bool]:
    """The project's files, or the given files and folders' YAML files (a partial plan)."""
    if not paths:
        return project.files(), False
    files: list[Path] = []
    problems = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            files += sorted(p.resolve() for p in path.rglob("*")
                            if p.suffix in SUFFIXES and p.is_file() and p.name != project.file.name)
        elif path.is_file():
            files.append(path.resolve())
        else:
            problems.append(Problem(text, "no such file or folder"))
    if problems:
        raise SpecError(problems)
    return sorted(set(files)), True


def make_plan(ps: ProjectState, options: PlanOptions) -> Planned:
    files, partial = files_for(ps.project, options.paths)
    doc = ps.read()
    desired = read_desired(ps.project, files,
                           lambda name: ps.local.secrets.path(cluster_key(name)),
                           None if partial else set(files))
    if options.refresh:
        from .refresh import refresh  # the HTTP and SSH clients: only when asking

        live = refresh(doc, ps)
    else:
        live = Live(False)
    plan = plan_project(desired, doc, live, partial=partial)
    return Planned(plan, {d.address: d for d in desired}, doc,
                   [ps.project.relative(path) for path in files])
