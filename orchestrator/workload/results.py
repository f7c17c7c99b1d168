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
from typing import Any, Literal

from ..contract import RESULTS_FOLDER as FOLDER
from ..contract import epoch_line, result_line
from . import timing, tracking
from .card import mark_checkpoint
from .storage import join, read_history, uri_in, write_bytes


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
                row["checkpoint"] = uri_in(run_uri, checkpoint.path)
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


SPLITS = ("train", "valid", "validation", "val", "eval", "test")
MARKERS = ("o", "s", "^", "D", "v", "P")
LINES: tuple[Literal["-", "--", ":", "-."], ...] = ("-", "--", ":", "-.")
LABEL_CHARACTERS = 40        # a name in the legend, at most (longer ones end in "…")
SHORT_PARAMETERS = 24        # the parameters that differ join a run's name up to this long
FEW_EPOCHS = 12              # up to this many epochs on an axis, each has its tick


def family(key: str) -> str:
    """What a metric measures, its split taken off: `train_loss`, `valid-logloss` -> `loss`,
    `logloss`."""
    split, _, rest = key.replace("-", "_", 1).partition("_")
    return key[len(split) + 1:] if rest and split in SPLITS else key


def _is_train(key: str) -> bool:
    return key != family(key) and key.startswith("train")


def curve_keys(history: list[dict[str, Any]]) -> list[str]:
    """The metrics worth a curve: losses and accuracies (`loss`, `train_loss`, `valid_accuracy`),
    else the boosting trainers' per-round metrics (`train-logloss`, `valid-binary_error`)."""
    seen: list[str] = []
    for row in history:
        seen += [k for k, v in row.items() if k not in seen and _number(v)]
    keys = [k for k in seen if family(k) in ("loss", "accuracy")]
    return keys or [k for k in seen if k.endswith(("logloss", "error", "rmse"))]


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def steps(history: list[dict[str, Any]]) -> list[int]:
    """Each row's epoch (the boosting trainers' rows: the round, counted from 1)."""
    return [int(r.get("epoch", i + 1)) for i, r in enumerate(history)]


def curve_label(name: str, differs: dict[str, Any]) -> str:
    """A run's (or a trial's) curves' name: its own, and the parameters that differ when they
    are short (`mlp-2 lr=0.03`), each by the last part of its dotted key."""
    text = " ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in differs.items())
    return " ".join(p for p in (name, text if len(text) <= SHORT_PARAMETERS else "") if p)


def shorten(text: str, most: int = LABEL_CHARACTERS) -> str:
    """`text` cut to `most` characters, ending in "…"; a curve's label (`curve_label`: a name,
    then the parameters that differ) keeps its parameters whole and cuts the name."""
    if len(text) <= most:
        return text
    name, _, differs = text.partition(" ")
    if differs and "=" in differs and len(differs) <= most - 6:
        return name[:most - len(differs) - 2] + "… " + differs
    return text[:most - 1] + "…"


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
    drawn.savefig(buffer, format="png", dpi=100)
    pyplot.close(drawn)
    return buffer.getvalue()


def figure(curves: dict[str, list[dict[str, Any]]], title: str) -> Any:
    """A matplotlib figure: a panel per metric (`family`: loss, accuracy, logloss...) with its
    train/valid twins, whole epochs on the x axis, one legend below the panels.

    Several runs (`curves`' labels): a colour per run, its light shade for the twin; one run
    (a label "" is none): a colour per metric. Either way the twins differ in marker and line
    too. Runs of one epoch are points side by side over their epoch."""
    keys: list[str] = []
    for history in curves.values():
        keys += [k for k in curve_keys(history) if k not in keys]
    if not keys:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    families = list(dict.fromkeys(family(k) for k in keys))
    panels = [sorted((k for k in keys if family(k) == f), key=_is_train) for f in families]
    handles = _legend(curves, panels)
    width = min(16.0, max(8.0, 4.5 * len(panels)))
    longest = max(len(h.get_label()) for h in handles)
    columns = max(1, min(len(handles), int(width // (0.8 + 0.075 * longest))))
    rows = -(-len(handles) // columns)
    drawn, axes = pyplot.subplots(1, len(panels), figsize=(width, 4.2 + 0.25 * rows),
                                  squeeze=False, layout="constrained")
    for ax, panel in zip(axes[0], panels, strict=True):
        _draw(ax, curves, panel)
    drawn.legend(handles=handles, loc="outside lower center", ncols=columns, fontsize="small",
                 frameon=False, title=shorten(next(iter(curves))) if len(curves) == 1 else None)
    drawn.suptitle(shorten(title, int(width * 9)))   # about as many characters as fit
    return drawn


PALETTES = ("tab20", "tab20b", "tab20c")   # 10 pairs each: 30 runs in colours of their own


def _colour(run: int, metric: int, runs: int) -> Any:
    if runs == 1:
        return f"C{metric % 10}"
    from matplotlib import colormaps

    palette = colormaps[PALETTES[(run // 10) % len(PALETTES)]]
    return palette(2 * (run % 10) + metric % 2)   # a hue per run, in two shades


def _draw(ax: Any, curves: dict[str, list[dict[str, Any]]], panel: list[str]) -> None:
    series = []
    for run, history in enumerate(curves.values()):
        for metric, key in enumerate(panel):
            points = [(step, row[key]) for step, row in zip(steps(history), history, strict=True)
                      if _number(row.get(key))]
            if points:
                series.append((run, metric, points))
    alone = all(len(points) == 1 for _, _, points in series)   # one epoch each: side by side
    for index, (run, metric, points) in enumerate(series):
        shift = 0.6 * index / (len(series) - 1) - 0.3 if alone and len(series) > 1 else 0.0
        ax.plot([x + shift for x, _ in points], [y for _, y in points],
                color=_colour(run, metric, len(curves)), marker=MARKERS[metric % len(MARKERS)],
                linestyle=LINES[metric % len(LINES)],
                markersize=8 if alone else 4 if metric else 7)   # a twin's inside, if equal
        if alone:   # a point's height is hard to read off the axis: its value beside it
            ax.annotate(f"{points[0][1]:.3g}", (points[0][0] + shift, points[0][1]),
                        textcoords="offset points", xytext=(0, 8), ha="center",
                        fontsize="x-small")
    if alone:
        ax.margins(y=0.15)   # room for the values above the points
    epochs = [x for _, _, points in series for x, _ in points]
    if epochs and max(epochs) - min(epochs) < FEW_EPOCHS:
        ax.set_xlim(min(epochs) - 0.5, max(epochs) + 0.5)
        ax.set_xticks(range(min(epochs), max(epochs) + 1))
    else:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # epochs are whole numbers
    rounds = not any("epoch" in row for history in curves.values() for row in history)
    ax.set_xlabel("round" if rounds else "epoch")   # the boosting trainers' rows: rounds
    ax.set_ylabel(family(panel[0]))
    ax.grid(alpha=0.3)


def _legend(curves: dict[str, list[dict[str, Any]]], panels: list[list[str]]) -> list[Any]:
    """Several runs: a line of each run's colour, then the metrics' markers and lines (in grey,
    dark or light as the runs' shades); one run: the metrics in their colours. Metrics drawn
    alike in different panels share an entry (`loss, accuracy`)."""
    from matplotlib.lines import Line2D

    runs = len(curves)
    handles = [Line2D([], [], color=_colour(run, 0, runs), linewidth=3, label=shorten(name))
               for run, name in enumerate(curves)] if runs > 1 else []
    alike: dict[int, list[str]] = {}
    for panel in panels:
        for metric, key in enumerate(panel):
            alike.setdefault(metric, []).append(key)
    for metric, names in sorted(alike.items()):
        colour = ("0.2", "0.6")[metric % 2] if runs > 1 else _colour(0, metric, 1)
        handles.append(Line2D([], [], color=colour, marker=MARKERS[metric % len(MARKERS)],
                              linestyle=LINES[metric % len(LINES)],
                              label=shorten(", ".join(names))))
    return handles


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
