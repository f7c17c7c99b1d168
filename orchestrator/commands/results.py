"""orchestrate results RUN: a finished run's metrics, best checkpoint and plot."""
from __future__ import annotations

import argparse
import json
from typing import Any

from ..output import add_format_argument, emit_json, print_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN",
                        help="a run name, a job id, or the run's folder (path or URI)")
    add_format_argument(parser)


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
    from ..jobs.experiment import find_results
    from ..state import State

    show(find_results(args.run, State.here()), args.format)
    return 0
