"""What a run leaves behind: metrics history (JSON + CSV), a PNG plot, a summary, a log line.

Everything goes to `<storage_path>/<run name>/orchestrate/` through pyarrow's filesystems
(`storage`, whose functions this module hands on to its readers), so it works the same for local
paths and s3:// or gs:// storage. The last line of the job's log is
`ORCHESTRATE_RESULT {json}`, so the client gets the results even when it cannot read the storage.
"""
from __future__ import annotations

import io
import json
import time
from typing import Any

from ..contract import RESULTS_FOLDER as FOLDER
from ..contract import epoch_line, result_line
from . import timing, tracking
from .card import mark_checkpoint
from .storage import join, read_history, write_bytes


def make_history_callback(run_uri: str, trial: str | None = None) -> Any:
    """A Ray Train UserCallback (runs in the controller): prints progress, appends the history
    (which `tracking.following` sends to MLflow). `trial`: the Tune trial it belongs to, named
    in the progress lines."""
    from ray.train import UserCallback

    class HistoryCallback(UserCallback):
        def __init__(self) -> None:
            self.history: list[dict[str, Any]] | None = None

        def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
            if self.history is None:  # a resumed run continues the history it had
                self.history = read_history(run_uri)
            row = {k: v for k, v in (metrics[0] if metrics else {}).items() if _scalar(v)}
            if checkpoint is not None:
                mark_checkpoint(checkpoint, run_uri)
                row["checkpoint"] = checkpoint.path
            self.history.append(row)
            line = dict(row, trial=trial) if trial else dict(row)
            line[timing.REPORTED] = time.time()
            print(epoch_line(line), flush=True)
            write_bytes(join(run_uri, FOLDER, "metrics.json"), json.dumps(self.history).encode())

    return HistoryCallback()


def _scalar(value: object) -> bool:
    return isinstance(value, (int, float, str, bool)) or value is None


def to_csv(history: list[dict[str, Any]]) -> bytes:
    import csv

    columns: list[str] = []
    for row in history:
        columns += [k for k in row if k not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    writer.writerows(history)
    return buffer.getvalue().encode()


def curve_keys(history: list[dict[str, Any]]) -> list[str]:
    """The metrics worth a curve: loss and accuracy, or the boosting trainers' per-round metrics."""
    keys = [k for k in ("loss", "train_loss", "accuracy") if any(k in r for r in history)]
    if not keys and history:  # e.g. XGBoost's train-logloss, LightGBM's valid-binary_error
        keys = [k for k in history[0] if k.endswith(("logloss", "error", "rmse"))]
    return keys


def steps(history: list[dict[str, Any]]) -> list[int]:
    """Each row's epoch (the boosting trainers' rows: the round, counted from 1)."""
    return [int(r.get("epoch", i + 1)) for i, r in enumerate(history)]


def plot(history: list[dict[str, Any]], title: str) -> bytes | None:
    """Loss and accuracy per epoch (or per boosting round) as a PNG."""
    return overlay({"": history}, title)


def overlay(curves: dict[str, list[dict[str, Any]]], title: str) -> bytes | None:
    """Every curve's loss and accuracy per epoch in one PNG (`figure`); None when there is
    nothing to draw."""
    drawn = figure(curves, title)
    if drawn is None:
        return None
    from matplotlib import pyplot

    buffer = io.BytesIO()
    drawn.savefig(buffer, format="png", dpi=80)
    pyplot.close(drawn)
    return buffer.getvalue()


def figure(curves: dict[str, list[dict[str, Any]]], title: str) -> Any:
    """A matplotlib figure: losses on the left, accuracy (if any) on the right, one line per
    (label, metric), whole epochs on the x axis. A curve labelled "" is named by its metric."""
    keys: list[str] = []
    for history in curves.values():
        keys += [k for k in curve_keys(history) if k not in keys]
    if not keys:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
    from matplotlib.ticker import MaxNLocator

    panels = [[k for k in keys if k != "accuracy"], [k for k in keys if k == "accuracy"]]
    panels = [keys_ for keys_ in panels if keys_]
    drawn, axes = pyplot.subplots(1, len(panels), figsize=(10, 4), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        for index, (label, history) in enumerate(curves.items()):
            for number, key in enumerate(panel):  # a colour per curve, a line style per metric
                style = ("-", "--", ":", "-.")[number % 4]
                points = [(step, row[key]) for step, row in zip(steps(history), history, strict=True)
                          if isinstance(row.get(key), (int, float))]
                if points:
                    name = " ".join(p for p in (label, key if len(panel) > 1 or not label else "") if p)
                    ax.plot(*zip(*points, strict=True), marker="o", label=name, linestyle=style,
                            color=f"C{index % 10}" if label else None)
        ax.set_xlabel("epoch")
        ax.set_ylabel(", ".join(panel) if len(panel) < 3 else "loss")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
        ax.legend(fontsize="small")
    drawn.suptitle(title)
    return drawn


def finish(run_uri: str, summary: dict[str, Any], history: list[dict[str, Any]], *,
           config: Any = None, png: bytes | None = None, tracked: Any = None) -> dict[str, Any]:
    """Write history, plot (`png`, else the history's) and summary next to the run, with the
    run's parameters (from `config`, the JobConfig); finish the MLflow run `tracked` (its final
    metrics; plot, summary and the rendered experiment as artifacts); print the result line;
    return the summary."""
    folder = join(run_uri, FOLDER)
    summary = dict(summary, run_path=run_uri, history=join(folder, "metrics.json"))
    if config is not None:
        summary["params"] = tracking.params(config)
    if history:
        write_bytes(join(folder, "metrics.json"), json.dumps(history).encode())
        write_bytes(join(folder, "metrics.csv"), to_csv(history))
        summary["history_csv"] = join(folder, "metrics.csv")
        png = png or plot(history, summary.get("name", ""))
    if png:
        write_bytes(join(folder, "metrics.png"), png)
        summary["plot"] = join(folder, "metrics.png")
    if tracked is not None:
        summary["tracking"] = _track(tracked, summary, config, png, len(history))
    write_bytes(join(folder, "summary.json"), json.dumps(summary, indent=2, default=str).encode())
    timing.mark("results")
    print(result_line(dict(summary, timing=timing.marks())), flush=True)
    return summary


def _track(tracked: Any, summary: dict[str, Any], config: Any, png: bytes | None,
           epochs: int) -> dict[str, Any]:
    """Finish the MLflow run; what the summary says of it (with the error if that failed)."""
    said = {"tracking_uri": tracking.public_uri(tracked.tracking_uri),
            "experiment_id": tracked.experiment_id, "run_id": tracked.run_id}
    files = {"summary.json": json.dumps(summary, indent=2, default=str).encode(),
             "experiment.json": json.dumps(config, indent=2, sort_keys=True).encode()}
    if png:
        files["metrics.png"] = png
    section: dict[str, Any] = dict(tracking.section(config or {}) or {})
    try:
        # A run's final metrics are its last epoch's, logged already; a sweep's parent has no
        # epochs of its own: it gets the best trial's.
        tracking.finish(tracked, summary, files, log_artifacts=section.get("log_artifacts", True),
                        step=max(epochs, 1) if "trials" in summary else None)
    except Exception as exc:  # noqa: BLE001 - the run itself succeeded; say what tracking lost
        said["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        print(f"orchestrate: warning: finishing the MLflow run failed: {said['error']}", flush=True)
    return said
