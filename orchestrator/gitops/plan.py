"""The `plan` use case: the project's files (or the ones given), its state, a refresh of what
is live, and the planner's decision. Takes no lock and writes nothing.

    files, partial = files_for(project, paths)
    result = make_plan(project_state, PlanOptions(paths, refresh))   -> Planned
"""
from __future__ import annotations

import dataclasses
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


@dataclass(frozen=True)
class PlanOptions:
    paths: tuple[str, ...] = ()     # explicit files or folders: a partial plan
    refresh: bool = True
    here: bool = False              # apply launches from here: key files and mounts must exist


@dataclass(frozen=True)
class Planned:
    plan: ProjectPlan
    desired: dict[str, Desired]     # address -> what the file asks for
    doc: StateDoc
    files: list[str]                # the files planned, relative to the project's root
    live: Live                      # what the refresh found


def files_for(project: ProjectSpec, paths: tuple[str, ...]) -> tuple[list[Path], bool]:
    """The project's files, or those of them given (files, or folders: the project's files
    under them): a partial plan. A given file the project does not include is refused, since
    a later full plan would delete what it made."""
    everything = project.files()
    if not paths:
        return everything, False
    chosen: set[Path] = set()
    problems = []
    for text in paths:
        path = Path(text).resolve()
        if path.is_dir():
            found = [f for f in everything if path == f.parent or path in f.parents]
            if not found:
                problems.append(Problem(text, "the folder holds none of the project's files",
                                        hint=f"the project's include globs: "
                                             f"{', '.join(project.include)}"))
            chosen.update(found)
        elif not path.is_file():
            problems.append(Problem(text, "no such file or folder"))
        elif path not in everything:
            problems.append(Problem(text, f"not one of project {project.name}'s files",
                                    hint=f"add it to `include` in {project.file} (now: "
                                         f"{', '.join(project.include)}), or check `exclude`"))
        else:
            chosen.add(path)
    if problems:
        raise SpecError(problems)
    return sorted(chosen), True


def check_not_empty(project: ProjectSpec, files: list[Path], doc: StateDoc) -> None:
    """A project whose globs match no file at all would delete everything its state holds:
    more likely a wrong glob or folder than a wish, so it is refused."""
    if files or not doc.resources:
        return
    raise SpecError([project.source.problem(("include",), "no file matches these globs, and "
                                            "the state holds " + ", ".join(sorted(doc.resources)),
                                            "check the globs (relative to this file); to remove "
                                            "everything, `orchestrate down` the clusters and "
                                            "`orchestrate state rm` the rest")
                     if project.source else Problem(str(project.file), "no file matches include")])


def make_plan(ps: ProjectState, options: PlanOptions) -> Planned:
    files, partial = files_for(ps.project, options.paths)
    doc = ps.read()
    if not partial:
        check_not_empty(ps.project, files, doc)
    desired = read_desired(ps.project, files,
                           lambda name: ps.machine.secrets.path(cluster_key(name)),
                           None if partial else set(files), here=options.here)
    if options.refresh:
        from .refresh import refresh  # the HTTP and SSH clients: only when asking

        live = refresh(doc, ps, {d.name: d for d in desired if d.kind == "cluster"})
    else:
        live = Live(False)
    plan = dataclasses.replace(plan_project(desired, doc, live, partial=partial,
                                            budget=ps.project.budget),
                               project_file=str(ps.project.file))
    return Planned(plan, {d.address: d for d in desired}, doc,
                   [ps.project.relative(path) for path in files], live)
