"""orchestrate plan [PATH...]: what `apply` would change, per address, with the reason.

Read-only and takes no lock. Exit codes with --detailed-exitcode: 0 no changes, 1 error,
2 changes.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..output import info

if TYPE_CHECKING:
    from ..gitops.planner import ProjectPlan
    from ..gitops.store import ProjectState


def truth(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "yes", "1", "on"):
        return True
    if value in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_project_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", metavar="FILE",
                        help="the project file (default: orchestrate.yaml here or above)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="plan only these files or folders (a partial plan never deletes)")
    add_project_argument(parser)
    parser.add_argument("--refresh", type=truth, default=True, metavar="true|false",
                        help="ask the clusters what is live first (default: true)")
    parser.add_argument("--out", metavar="PLANFILE", help="save the plan for `apply PLANFILE`")
    parser.add_argument("--detailed-exitcode", action="store_true",
                        help="exit 0 when there are no changes, 2 when there are, 1 on errors")
    parser.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                        help="text for people, json for programs, markdown for a PR comment")


def open_project(args: argparse.Namespace, start: Path | None = None) -> ProjectState:
    from ..gitops.store import ProjectState
    from ..language.project import find_project, project_for

    if start is None:  # the project here (or above); else the first path's
        paths = getattr(args, "paths", None)
        start = Path(paths[0]) if paths and find_project(Path.cwd()) is None else Path.cwd()
    return ProjectState.open(project_for(args.project, start))


def emit(plan: ProjectPlan, commit: str | None, fmt: str) -> None:
    from ..gitops import report

    if fmt == "json":
        json.dump(report.as_json(plan, commit), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    elif fmt == "markdown":
        sys.stdout.write(report.markdown(plan, commit))
    else:
        print(report.text(plan))


def run(args: argparse.Namespace) -> int:
    from ..gitops import report
    from ..gitops.plan import PlanOptions, make_plan

    ps = open_project(args)
    if args.refresh:
        info(f"refreshing what is live (state: {ps.backend.url})")
    planned = make_plan(ps, PlanOptions(tuple(args.paths), refresh=args.refresh))
    commit = report.git_commit(ps.project.root)
    if args.out:
        out = Path(args.out)
        report.save(out, planned.plan, commit, planned.files)
        info(f"saved the plan to {args.out}: apply it with `orchestrate apply {args.out}`")
        if ps.project.root in out.resolve().parents:
            info(f"note: {args.out} is inside the project; list it in .gitignore (or write it "
                 f"elsewhere, e.g. $RUNNER_TEMP), or an experiment that ships this folder ships "
                 f"it too and the saved plan goes stale")
    emit(planned.plan, commit, args.format)
    if args.detailed_exitcode and planned.plan.actions:
        return 2
    return 0
