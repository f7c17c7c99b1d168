"""orchestrate results RUN: a finished run's metrics, best checkpoint and plot."""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ..errors import JobError
from ..output import add_format_argument, emit_json, print_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN",
                        help="a run name, a job id, or the run's folder (path or URI)")
    add_format_argument(parser)


def find_summary(key: str) -> dict[str, Any]:
    from ..contract import RESULTS_FOLDER
    from ..state import State
    from ..util.uris import is_uri
    from ..workload import results

    store = State.here().store
    summary = store.run(key)
    job = store.job(key)
    if summary is None and job:
        summary = store.run(job.get("name") or "")
    if summary is None and ("/" in key or is_uri(key)):
        uri = key if is_uri(key) else os.path.abspath(key)
        data = results.read_bytes(results.join(uri, RESULTS_FOLDER, "summary.json"))
        summary = json.loads(data) if data else None
    if summary is None:
        raise JobError(f"no results for {key!r}",
                       hint="give a run name from `orchestrate run`, a job id, or a run folder")
    return summary


def show(summary: dict[str, Any], fmt: str = "text") -> None:
    """The results table shared with `orchestrate run`."""
    if fmt == "json":
        emit_json(summary)
        return
    rows = [[k, _number(v)] for k, v in (summary.get("metrics") or {}).items()]
    if summary.get("best_config") is not None:
        rows.append(["best config", json.dumps(summary["best_config"], sort_keys=True)])
    for key, label in (("best_checkpoint", "best checkpoint"), ("wall_time_s", "wall time (s)"),
                       ("run_path", "run folder"), ("history_csv", "history"), ("plot", "plot")):
        if summary.get(key) is not None:
            rows.append([label, _number(summary[key])])
    print_table(rows, [f"RUN {summary.get('name', '')}", summary.get("status", "")])


def _number(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def run(args: argparse.Namespace) -> int:
    show(find_summary(args.run), args.format)
    return 0
