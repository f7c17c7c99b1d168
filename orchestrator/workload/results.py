"""What a run leaves behind: metrics history (JSON + CSV), a PNG plot, a summary, a log line.

Everything goes to `<storage_path>/<run name>/orchestrate/` through pyarrow's filesystems, so it
works the same for local paths and s3:// or gs:// storage. The last line of the job's log is
`ORCHESTRATE_RESULT {json}`, so the client gets the results even when it cannot read the storage.
"""
from __future__ import annotations

import io
import json
import os
from typing import Any, cast

from ..contract import RESULTS_FOLDER as FOLDER
from ..contract import JobConfig, epoch_line, result_line
from ..util.uris import is_uri


def storage_root(config: JobConfig) -> str:
    path = (config.get("run_config") or {}).get("storage_path") or "~/ray_results"
    return path if is_uri(path) else os.path.abspath(os.path.expanduser(path))


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def _fs(uri: str) -> tuple[Any, str]:
    """(pyarrow FileSystem, path in it)."""
    import pyarrow.fs

    fs, path = pyarrow.fs.FileSystem.from_uri(uri)
    return fs, path


def write_bytes(uri: str, data: bytes) -> None:
    fs, path = _fs(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as stream:
        stream.write(data)


def read_bytes(uri: str) -> bytes | None:
    import pyarrow

    try:
        fs, path = _fs(uri)
        with fs.open_input_stream(path) as stream:
            return cast(bytes, stream.read())  # pyarrow is untyped
    except (OSError, pyarrow.ArrowException):
        return None


def exists(uri: str) -> bool:
    import pyarrow.fs

    fs, path = _fs(uri)
    return cast(bool, fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound)  # pyarrow is untyped


def read_history(run_uri: str) -> list[dict[str, Any]]:
    data = read_bytes(join(run_uri, FOLDER, "metrics.json"))
    return json.loads(data) if data else []


def make_history_callback(run_uri: str) -> Any:
    """A Ray Train UserCallback (runs in the controller): prints progress, appends the history."""
    from ray.train import UserCallback

    class HistoryCallback(UserCallback):
        def __init__(self) -> None:
            self.history: list[dict[str, Any]] | None = None

        def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
            if self.history is None:  # a resumed run continues the history it had
                self.history = read_history(run_uri)
            row = {k: v for k, v in (metrics[0] if metrics else {}).items() if _scalar(v)}
            if checkpoint is not None:
                from .card import mark_checkpoint

                mark_checkpoint(checkpoint, run_uri)
                row["checkpoint"] = checkpoint.path
            self.history.append(row)
            print(epoch_line(row), flush=True)
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


def plot(history: list[dict[str, Any]], title: str) -> bytes | None:
    """Loss and accuracy per epoch (or per boosting round) as a PNG."""
    keys = [k for k in ("loss", "train_loss", "accuracy") if any(k in r for r in history)]
    if not keys and history:  # XGBoost reports e.g. train-logloss, valid-error
        keys = [k for k in history[0] if k.endswith(("logloss", "error", "rmse"))]
    if not keys:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(1, 2 if "accuracy" in keys else 1, figsize=(10, 4), squeeze=False)
    steps = [r.get("epoch", i + 1) for i, r in enumerate(history)]
    for key in keys:
        ax = axes[0][1] if key == "accuracy" else axes[0][0]
        ax.plot(steps, [r.get(key) for r in history], marker="o", label=key)
        ax.set_xlabel("epoch")
        ax.legend()
    figure.suptitle(title)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    pyplot.close(figure)
    return buffer.getvalue()


def finish(run_uri: str, summary: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
    """Write history, plot and summary next to the run; print the result line; return summary."""
    folder = join(run_uri, FOLDER)
    summary = dict(summary, run_path=run_uri, history=join(folder, "metrics.json"))
    if history:
        write_bytes(join(folder, "metrics.json"), json.dumps(history).encode())
        write_bytes(join(folder, "metrics.csv"), to_csv(history))
        summary["history_csv"] = join(folder, "metrics.csv")
        png = plot(history, summary.get("name", ""))
        if png:
            write_bytes(join(folder, "metrics.png"), png)
            summary["plot"] = join(folder, "metrics.png")
    write_bytes(join(folder, "summary.json"), json.dumps(summary, indent=2, default=str).encode())
    print(result_line(summary), flush=True)
    return summary
