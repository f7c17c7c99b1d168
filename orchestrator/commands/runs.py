"""orchestrate runs [EXPERIMENT] [--cluster C]: the runs submitted from here, newest first."""
from __future__ import annotations

import argparse
import time
from typing import Any

from ..output import add_format_argument, emit_json, info, print_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", nargs="?", metavar="EXPERIMENT",
                        help="only this experiment's runs (its file, or its name)")
    parser.add_argument("--cluster", metavar="NAME",
                        help="only the runs on this cluster ('embedded': the embedded Ray)")
    add_format_argument(parser)


def run(args: argparse.Namespace) -> int:
    from ..results import runs
    from ..state import State

    state = State.here()
    rows = runs.refresh(runs.recorded(state, experiment=args.experiment, cluster=args.cluster),
                        state, info)
    if args.format == "json":
        emit_json(rows)
        return 0
    if not rows:
        print("no runs recorded here" + (" for that filter" if args.experiment or args.cluster
                                          else ": start one with `orchestrate run EXPERIMENT.yaml`"))
        return 0
    print_table([[r["experiment"], r["run"], r["status"], _when(r["started"]),
                  _duration(r["wall_time_s"]), _metrics(r["metrics"]), r["cluster"],
                  r["storage"] or r["error"] or _waiting(r) or r["run_folder"] or ""] for r in rows],
                ["EXPERIMENT", "RUN", "STATUS", "STARTED", "WALL", "FINAL METRICS", "CLUSTER",
                 "STORAGE"], max_cell=60)
    return 0


def _waiting(row: dict[str, Any]) -> str:
    """A queued run: what it waits for (`run.needs`)."""
    return f"queued for {row['needs']}" if row["status"] == "PENDING" and row.get("needs") else ""


def _when(seconds: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds)) if seconds else "-"


def _duration(seconds: float | None) -> str:
    from ..run.progress import clock

    return clock(seconds) if seconds is not None else "-"


def _metrics(metrics: dict[str, Any]) -> str:
    from ..run.progress import metrics_text

    return metrics_text(metrics, limit=3).replace("  ", " ")
