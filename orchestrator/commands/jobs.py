"""orchestrate jobs: the jobs on a cluster or on the embedded Ray."""
from __future__ import annotations

import argparse
import time

from ..output import add_format_argument, emit_json, print_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", metavar="NAME|CLUSTER.yaml", help="the cluster to ask")
    add_format_argument(parser)


def _when(ms: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else "-"


def run(args: argparse.Namespace) -> int:
    from ..clients.targets import jobs_on
    from ..reach import pick
    from ..state import State

    state = State.here()
    with jobs_on(pick.optional_cluster(args.cluster, state), state) as jobs:
        rows = [{"job_id": j.submission_id, "status": str(getattr(j.status, "value", j.status)),
                 "experiment": (j.metadata or {}).get("experiment", ""),
                 "start_time": j.start_time, "end_time": j.end_time,
                 "message": j.message or ""} for j in jobs.list()]
    rows.sort(key=lambda r: r["start_time"] or 0)
    if args.format == "json":
        emit_json(rows)
        return 0
    if not rows:
        print("no jobs")
        return 0
    print_table([[r["job_id"], r["status"], r["experiment"], _when(r["start_time"]),
                  _when(r["end_time"])] for r in rows],
                ["JOB", "STATUS", "EXPERIMENT", "STARTED", "ENDED"])
    return 0
