"""orchestrate predict (EXPERIMENT.yaml | RUN_DIR | CHECKPOINT) --data PATH --output DIR:
batch prediction with a run's checkpoint, as a Ray job on the experiment's cluster (or the embedded
Ray), through the preprocessor the run fitted.

`--format` is the report's format (text or json), as for every command; the predictions' file
format is `--output-format`.
"""
from __future__ import annotations

import argparse
from typing import Any

from ..output import add_format_argument, emit_json, info, print_table


def _positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            value = -1
        if not value > 0 and not (kind is float and value == 0):
            raise argparse.ArgumentTypeError(f"expected a {'number' if kind is float else 'whole number'} "
                                             f"above 0, got {text!r}")
        return value
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE",
                        help="an experiment file (its latest run), a run folder, or a checkpoint")
    parser.add_argument("--data", required=True, help="the rows to predict: a path or a URI")
    parser.add_argument("--data-format", choices=("parquet", "csv", "json", "numpy", "images"),
                        help="default: from the data's suffix, as for datasets; images for a "
                             "folder of image files (one prediction per file, with its path)")
    parser.add_argument("--output", required=True,
                        help="a folder (path or URI): predictions/ and predict_summary.json go there")
    parser.add_argument("--output-format", choices=("parquet", "csv", "json"), default="parquet",
                        help="how the predictions are written (default: parquet)")
    parser.add_argument("--checkpoint", choices=("best", "latest"), default="best",
                        help="of a run: the best by the experiment's checkpoint score, or the last")
    parser.add_argument("--batch-size", type=_positive(int), default=256, metavar="ROWS",
                        help="rows per batch handed to the model (default: 256)")
    parser.add_argument("--workers", type=_positive(int), default=1,
                        help="actors that each load the model once (default 1)")
    parser.add_argument("--gpus", type=_positive(float), default=0.0, help="GPUs per actor")
    parser.add_argument("--keep-columns", metavar="COL,COL",
                        help="input columns to carry into the output (default: all but images)")
    parser.add_argument("--evaluate", action="store_true",
                        help="the data has the label column: report accuracy and loss (or RMSE)")
    parser.add_argument("--cluster", metavar="NAME",
                        help="for a run or checkpoint folder: the cluster that holds it")
    parser.add_argument("--detach", action="store_true", help="return once the job is submitted")
    parser.add_argument("--force", action="store_true",
                        help="submit even if this exact request was already submitted")
    add_format_argument(parser)


def run(args: argparse.Namespace) -> int:
    from ..render.predict import Settings
    from ..serving import predict
    from ..state import State
    from .run import finish

    keep = tuple(c.strip() for c in args.keep_columns.split(",") if c.strip()) \
        if args.keep_columns is not None else None
    settings = Settings(output_format=args.output_format, checkpoint=args.checkpoint,
                        batch_size=args.batch_size, workers=args.workers, gpus=args.gpus,
                        keep_columns=keep, evaluate=args.evaluate)
    options = predict.PredictOptions(source=args.source, data=args.data, output=args.output,
                                     data_format=args.data_format, cluster=args.cluster,
                                     force=args.force, settings=settings, detach=args.detach)
    return finish(predict.run(options, State.here(), info), args.format, show)


def show(summary: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        emit_json(summary)
        return
    rows: list[list[Any]] = [["rows", summary.get("rows")],
                             ["rows/s", summary.get("rows_per_second")],
                             ["seconds", summary.get("seconds")]]
    rows += [[k, f"{v:.4g}" if isinstance(v, float) else v]
             for k, v in (summary.get("metrics") or {}).items()]
    rows += [["checkpoint", summary.get("checkpoint")], ["predictions", summary.get("output")],
             ["summary", summary.get("summary")], ["wall time (s)", summary.get("wall_time_s")]]
    print_table(rows, [f"PREDICT {summary.get('name', '')}", summary.get("status", "")])
