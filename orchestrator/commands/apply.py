"""orchestrate apply [PLANFILE | PATH...]: carry out a plan under the project's lock.

Plans again (a saved plan must still be what a plan would be now), asks at a terminal, needs
-y/--auto-approve without one and --allow-destructive for restart, replace, delete and stop,
--allow-over-budget for a plan over the project's `budget`.
Experiments are submitted detached (--wait follows them; exit 1 if one failed).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import OrchestrateError
from ..output import emit_json, info, is_interactive, seconds
from .plan import add_project_argument, open_project

if TYPE_CHECKING:
    from ..gitops.store import ProjectState


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PLANFILE|PATH",
                        help="a plan saved by `plan --out`, or files/folders (a partial apply)")
    add_project_argument(parser)
    parser.add_argument("-y", "--auto-approve", action="store_true",
                        help="do not ask (needed when no one is at a terminal)")
    parser.add_argument("--allow-destructive", action="store_true",
                        help="allow restart, replace, delete and stop")
    parser.add_argument("--allow-over-budget", action="store_true",
                        help="apply a plan that breaks the project's budget, on purpose")
    parser.add_argument("--wait", action="store_true",
                        help="follow the submitted jobs to their end; exit 1 if one failed")
    parser.add_argument("--lock-timeout", type=seconds, default=0, metavar="SECONDS",
                        help="wait this long for the state's lock (default: fail at once)")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text for people, json for programs")


def _is_plan_file(text: str) -> bool:
    path = Path(text)
    return path.is_file() and path.suffix not in (".yaml", ".yml")


def _open(args: argparse.Namespace, plan_file: Path | None) -> ProjectState:
    """The project: for a saved plan, the one here (or --project); an error names the plan's."""
    if plan_file is None:
        return open_project(args)
    from ..errors import SpecError
    from ..gitops import report

    try:
        return open_project(args, start=Path.cwd())
    except SpecError:
        saved = report.load(plan_file)
        raise OrchestrateError(f"{plan_file} is a plan of project {saved['project']!r}, and no "
                               f"orchestrate.yaml is here or above",
                               hint="run apply in the project's folder, or pass --project "
                                    "FILE") from None


def run(args: argparse.Namespace) -> int:
    from ..gitops import report
    from ..gitops.apply import ApplyOptions, apply_project

    plan_file = Path(args.paths[0]) if len(args.paths) == 1 and _is_plan_file(args.paths[0]) \
        else None
    paths = () if plan_file else tuple(args.paths)
    if plan_file is not None:
        args.paths = []
    ps = _open(args, plan_file)
    info(f"project {ps.project.name} from {ps.project.file} (state: {ps.backend.url})")

    def confirm(question: str) -> bool:
        info(question.rsplit("\n\n", 1)[0])
        if args.auto_approve:
            return True
        if not is_interactive():
            raise OrchestrateError("apply needs -y/--auto-approve when no one is at a terminal; "
                                   "nothing was changed")
        return input(f"{question.rsplit(chr(10) * 2, 1)[-1]} [y/N] ").strip().lower() in \
            ("y", "yes")

    options = ApplyOptions(paths=paths, plan_file=plan_file,
                           allow_destructive=args.allow_destructive,
                           allow_over_budget=args.allow_over_budget, wait=args.wait,
                           lock_timeout=args.lock_timeout)
    applied = apply_project(ps, options, info, confirm)
    plan = applied.planned.plan
    if args.format == "json":
        emit_json({"applied": [c.as_dict() for c in applied.done], "jobs": applied.jobs,
                   "results": applied.results,
                   "plan": report.as_json(plan, report.git_commit(ps.project.root)),
                   "serial": ps.doc.serial if ps.doc else plan.serial})
        return 0
    if not applied.done:
        info(report.summary_line(plan) + " Nothing to do.")
    else:
        info(f"Apply complete: {len(applied.done)} change(s) made "
             f"(state serial {ps.doc.serial if ps.doc else '?'}).")
    return 0
