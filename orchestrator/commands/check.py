"""orchestrate check [cluster.yaml ...]: cloud preflight.

Without files: which clouds have usable credentials (exit 1 only when none has).
With files: every preflight check of each cluster (exit 1 when any check fails).
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..output import add_format_argument, emit_json, info, print_table

if TYPE_CHECKING:
    from ..providers import CheckResult

HEADERS = ("CHECK", "RESULT", "DETAIL", "WHERE", "HINT")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="cluster.yaml",
                        help="cluster files to check; none: report which clouds are usable")
    add_format_argument(parser)


def _rows(results: list[CheckResult]) -> list[tuple[str, ...]]:
    return [(r.name, r.status, r.detail, r.where(), r.hint or "") for r in results]


def _credentials(args: argparse.Namespace) -> int:
    from ..providers import OK, check_credentials

    results = check_credentials()
    usable = [r for r in results if r.status == OK]
    if args.format == "json":
        emit_json({"ok": bool(usable), "clouds": [r.as_dict() for r in results]})
    else:
        print_table(_rows(results), HEADERS, max_cell=120)
        info(f"{len(usable)} of {len(results)} providers usable")
    return 0 if usable else 1


def run(args: argparse.Namespace) -> int:
    if not args.files:
        return _credentials(args)
    from ..language.cluster import load_cluster
    from ..providers import WARN, check_cluster, failures

    reports = []
    for path in args.files:
        spec = load_cluster(path, here=True)  # preflight of a launch from here
        if args.format != "json":
            info(f"checking {path} ({spec.provider}) ...")
        results = check_cluster(spec)
        reports.append((path, spec, results))
    failed = sum(len(failures(results)) for _, _, results in reports)
    if args.format == "json":
        emit_json({"ok": not failed, "files": [
            {"file": str(path), "cluster": spec.name, "provider": spec.provider,
             "ok": not failures(results), "checks": [r.as_dict() for r in results]}
            for path, spec, results in reports]})
    else:
        for index, (path, spec, results) in enumerate(reports):
            if index:
                print()
            print(f"{path} ({spec.name}, {spec.provider})")
            print_table(_rows(results), HEADERS, max_cell=120)
        warned = sum(1 for _, _, rs in reports for r in rs if r.status == WARN)
        info(f"{failed} failed, {warned} warnings" + ("" if failed else ": ready to launch"))
    return 1 if failed else 0
