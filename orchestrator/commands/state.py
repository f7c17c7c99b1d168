"""orchestrate state list | show ADDRESS | rm ADDRESS: inspect and repair a project's state.

`rm` forgets an address (its cluster or job keeps running; nothing is torn down), under the
state's lock; the next plan shows it as something to create.
"""
from __future__ import annotations

import argparse
from typing import Any

from ..errors import StateError
from ..output import emit_json, info, print_table
from .plan import add_project_argument, open_project


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("list", "show", "rm"),
                        help="list every entry, show one, or rm (forget) one without touching "
                             "what it describes")
    parser.add_argument("address", nargs="?", metavar="ADDRESS",
                        help="cluster/NAME or experiment/NAME (for show and rm)")
    add_project_argument(parser)
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="output format: text for people, json for scripts (default: text)")
    parser.set_defaults(paths=[])


def _status(entry: dict[str, Any]) -> str:
    if entry.get("kind") == "cluster":
        record = entry.get("record") or {}
        return f"{record.get('state')} at {record.get('head_ip')}"
    return f"job {entry.get('job_id')} ({entry.get('status')})"


def run(args: argparse.Namespace) -> int:
    ps = open_project(args)
    if args.action != "list" and not args.address:
        raise StateError(f"`orchestrate state {args.action}` needs an ADDRESS "
                         f"(cluster/NAME or experiment/NAME)")
    doc = ps.read()
    if args.action == "list":
        if args.format == "json":
            emit_json({"project": doc.project, "project_file": str(ps.project.file),
                       "lineage": doc.lineage, "serial": doc.serial,
                       "addresses": sorted(doc.resources)})
        else:
            info(f"project {doc.project} from {ps.project.file}, state {ps.backend.url}, "
                 f"serial {doc.serial}")
            print_table([(a, e.get("file", ""), _status(e), e.get("applied_by", ""))
                         for a, e in sorted(doc.resources.items())],
                        ("ADDRESS", "FILE", "STATUS", "APPLIED BY"))
        return 0
    if args.address not in doc.resources:
        known = ", ".join(sorted(doc.resources)) or "none"
        raise StateError(f"the state has no {args.address!r} (known: {known})")
    if args.action == "show":
        emit_json(doc.resources[args.address])
        return 0
    with ps.lock("state rm", progress=info):
        doc = ps.read()
        if doc.resources.pop(args.address, None) is not None:
            ps.write(doc)
    info(f"forgot {args.address} (serial {doc.serial}); whatever runs keeps running")
    return 0
