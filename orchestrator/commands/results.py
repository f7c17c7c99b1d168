"""orchestrate results RUN [RUN...]: a finished run's metrics, best checkpoint and plot (a Tune
run's trials ranked); several runs side by side, with one plot of all their curves."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..output import add_format_argument, emit_json, info, print_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", metavar="RUN", nargs="+",
                        help="a run name, a job id, or the run's folder (path or URI); several "
                             "to compare them")
    parser.add_argument("--plot", metavar="FILE.png", type=Path,
                        help="where the comparison's plot goes (default: beside orchestrate's "
                             "state, the path is printed)")
    add_format_argument(parser)


def show(summary: dict[str, Any], fmt: str = "text") -> None:
    """One run's results (shared with `orchestrate run`)."""
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
    if summary.get("phases"):
        from ..run.phases import text

        rows.append(["time (s)", text(summary["phases"])])
    tracking = summary.get("tracking") or {}
    if tracking.get("run_id"):
        rows.append(["mlflow run", f"{tracking['run_id']} ({tracking.get('tracking_uri')})"])
    if tracking.get("error"):
        rows.append(["mlflow", f"not finished: {tracking['error']}"])
    print_table(rows, [f"RUN {summary.get('name', '')}", summary.get("status", "")])
    if summary.get("trials"):
        print()
        _show_trials(summary)


def _show_trials(summary: dict[str, Any]) -> None:
    from ..results.compare import trials
    from ..util.text import differing, flatten

    ranked = trials(summary)
    params = [t.get("params") or flatten(t.get("config") or {}) for t in ranked]
    keys = differing(params) or sorted({k for p in params for k in p})
    metric = summary.get("metric") or ""
    print_table([[t.get("trial_id"), *[p.get(k) for k in keys], _number(t.get(metric)),
                  t.get("epochs", ""), "error" if t.get("error") else "ok"]
                 for t, p in zip(ranked, params, strict=True)],
                ["TRIAL", *[k.rsplit(".", 1)[-1] for k in keys],
                 f"{metric} ({summary.get('mode') or 'min'})", "EPOCHS", "STATUS"])


def _number(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def run(args: argparse.Namespace) -> int:
    from .. import api

    found = api.results(*args.runs, plot=args.plot)
    if isinstance(found, dict):
        show(found, args.format)
        return 0
    table = found.table
    if args.format == "json":
        emit_json(dict(table, summaries=found.summaries))
        return 0
    rows = [[key, *map(_number, values)] for key, values in table["params"].items()]
    rows += [[f"{m} (final)", *map(_number, v)] for m, v in table["final"].items()]
    rows += [[f"{m} (best)", *map(_number, v)] for m, v in table["best"].items()]
    print_table(rows or [["(no parameter or metric to compare)"] + [""] * len(found.summaries)],
                ["", *table["runs"]])
    if "plot" in table:
        info(f"plot: {table['plot']}")
    return 0
