"""orchestrate show PLANFILE: a saved plan as text, JSON, or markdown (a pull-request comment)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan_file", metavar="PLANFILE", help="a plan saved by `plan --out`")
    parser.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                        help="text for people, json for scripts, markdown for a pull request "
                             "comment (default: text)")


def run(args: argparse.Namespace) -> int:
    from ..gitops import report
    from .plan import emit

    document = report.load(Path(args.plan_file))
    if args.format == "json":
        json.dump({k: v for k, v in document.items() if k not in ("kind", "files")},
                  sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    emit(report.from_json(document), document.get("git_commit"), args.format)
    return 0
