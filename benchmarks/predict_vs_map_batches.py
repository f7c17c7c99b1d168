"""`orchestrate predict` against a hand-written Ray Data batch-inference script
(`handwritten/handwritten_predict.py`) submitted with `ray job submit`: one embedded local Ray,
the same checkpoint, data files, batch size and number of actors; each side writes parquet to a
fresh folder of its own; the order alternates every round; each command is timed from start to
exit.

    .venv/bin/python benchmarks/predict_vs_map_batches.py [--rounds 5] [--rows 8192] [--files 4]
        [--batch-size 256] [--workers 1] [--train-rows 2048]

Setup (not timed): synthetic CIFAR-layout parquet, and a tiny ViT trained for one epoch with
`orchestrate run` on the same local Ray; both sides predict with its best checkpoint.

Prints each round, then min / median / max of each side and the ratios of the medians: rows/s
(each side's own count, from the start of map_batches to the end of the write; target >= 0.9)
and wall time. These machines are noisy: report the medians, with their spread, never one round.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sides import MODEL, ROOT, SIDES, Bench, run, spread

HANDWRITTEN = ROOT / "benchmarks" / "handwritten"


@contextmanager
def setup(rows: int, files: int, train_rows: int) -> Iterator[tuple[Bench, int]]:
    """A scratch folder with the data, the embedded local Ray both sides submit to, and its CPUs;
    the Ray is stopped and the folder removed on the way out, also on error."""
    from orchestrator.reach import embedded
    from orchestrator.state import State
    from tests.workload.synthetic import write_image_parquet

    work = Path(tempfile.mkdtemp(prefix="orc-bench-predict-"))
    try:
        os.environ["ORCHESTRATE_HOME"] = str(work / "home")
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        write_image_parquet(work / "data" / "train", train_rows, seed=1, files=4)
        write_image_parquet(work / "data" / "valid", max(train_rows // 4, 1), seed=2, files=1)
        write_image_parquet(work / "data" / "predict", rows, seed=3, files=files)
        secrets = State.here().secrets
        try:
            with embedded.session(secrets) as (ray, _):
                env.update(embedded.client_environment(secrets), RAY_ADDRESS=ray.address)
                yield Bench(work, env, ray.address, train_rows, epochs=1, workers=1), ray.num_cpus
        finally:
            embedded.shutdown(secrets)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def train(bench: Bench) -> str:
    """One epoch of the tiny ViT with `orchestrate run`; its best checkpoint."""
    seconds, _, done = run(bench, "orchestrate")
    checkpoint = json.loads(done.stdout).get("best_checkpoint")
    if not checkpoint or not (Path(checkpoint) / "model.pt").exists():
        sys.exit(f"the training run left no checkpoint with a model.pt:\n{done.stdout[-3000:]}")
    print(f"setup: trained {bench.rows} rows for 1 epoch in {seconds:.1f} s; checkpoint {checkpoint}",
          flush=True)
    return str(checkpoint)


def command(bench: Bench, side: str, checkpoint: str, output: Path, batch: int, workers: int) -> list[str]:
    data = str(bench.work / "data" / "predict")
    if side == "orchestrate":
        return [sys.executable, "-m", "orchestrator", "predict", checkpoint, "--data", data,
                "--output", str(output), "--format", "json", "--batch-size", str(batch),
                "--workers", str(workers)]
    return [str(Path(sys.executable).parent / "ray"), "job", "submit", "--address", bench.address,
            "--working-dir", str(HANDWRITTEN), "--", "python", "handwritten_predict.py", data,
            str(output), checkpoint, str(workers), str(batch), json.dumps({"name": "vit", "args": MODEL})]


def predict(bench: Bench, side: str, checkpoint: str, output: Path, batch: int,
            workers: int) -> tuple[float, float, int]:
    """(wall seconds from start to exit, rows/s as the side reports it, rows); exits on failure."""
    line = command(bench, side, checkpoint, output, batch, workers)
    start = time.monotonic()
    done = subprocess.run(line, env=bench.env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(line)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    if side == "orchestrate":
        summary = json.loads(done.stdout)
        return seconds, float(summary["rows_per_second"]), int(summary["rows"])
    found = re.findall(r"HANDWRITTEN_PREDICT rows (\d+) seconds \S+ rows_per_second ([0-9.e+-]+)",
                       done.stdout + done.stderr)
    if not found:
        sys.exit(f"no HANDWRITTEN_PREDICT line in:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds, float(found[-1][1]), int(found[-1][0])


def same_outputs(folders: dict[str, Path], rows: int) -> str:
    """`folders`: each side's output folder (orchestrate writes into its predictions/). Both sides
    wrote the same columns, every row, and the same predictions (compared as counts per class:
    neither side promises the input's order); exits when they differ."""
    import numpy as np
    import pyarrow.parquet as pq

    tables = {side: pq.read_table(folder / "predictions" if side == "orchestrate" else folder)
              for side, folder in folders.items()}
    columns = {side: sorted(t.column_names) for side, t in tables.items()}
    counts = {side: np.bincount(t.column("prediction").to_numpy().astype(np.int64), minlength=10).tolist()
              for side, t in tables.items()}
    problems = [f"{side}: {t.num_rows} rows, not {rows}" for side, t in tables.items() if t.num_rows != rows]
    if len({tuple(c) for c in columns.values()}) != 1:
        problems.append(f"different columns: {columns}")
    if len({tuple(c) for c in counts.values()}) != 1:
        problems.append(f"different predictions per class: {counts}")
    if problems:
        sys.exit("the two sides' outputs differ: " + "; ".join(problems))
    return f"{rows} rows each, columns {', '.join(columns[SIDES[0]])}, same predictions per class"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=8192, help="rows to predict")
    parser.add_argument("--files", type=int, default=4, help="parquet files the rows are split into")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=1, help="prediction actors on each side")
    parser.add_argument("--train-rows", type=int, default=2048, help="rows of the one training epoch")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3: one round says nothing on a noisy machine")
    if min(args.rows, args.files, args.batch_size, args.workers, args.train_rows) < 1:
        parser.error("--rows, --files, --batch-size, --workers and --train-rows must be above 0")

    wall: dict[str, list[float]] = {side: [] for side in SIDES}
    speed: dict[str, list[float]] = {side: [] for side in SIDES}
    with setup(args.rows, args.files, args.train_rows) as (b, cpus):
        if args.workers > cpus - 1:  # orchestrate would shrink its pool; the script would wait for ever
            sys.exit(f"--workers {args.workers}: the local Ray has {cpus} CPUs, and reading and "
                     f"writing need one besides the actors; give at most {cpus - 1}")
        checkpoint = train(b)
        for i in range(args.rounds):
            folders = {side: b.work / "predictions" / f"{side}-{i}" for side in SIDES}
            # Alternate who goes first, so neither always gets the warmer machine.
            for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                seconds, rate, rows = predict(b, side, checkpoint, folders[side], args.batch_size,
                                              args.workers)
                if rows != args.rows:
                    sys.exit(f"{side} predicted {rows} rows, not {args.rows}")
                wall[side].append(seconds)
                speed[side].append(rate)
            if i == 0:
                print(f"outputs: {same_outputs(folders, args.rows)}", flush=True)
            print(f"round {i}: " + ", ".join(f"{side} {wall[side][-1]:.1f} s {speed[side][-1]:.1f} rows/s"
                                             for side in SIDES), flush=True)

    print(f"\n{args.rounds} rounds, {args.rows} rows in {args.files} files, batch {args.batch_size}, "
          f"{args.workers} actor(s), local Ray of {cpus} CPUs, "
          f"{platform.node()} ({platform.machine()}, {len(os.sched_getaffinity(0))} cores)")
    for side in SIDES:
        print(f"wall s      {side:<12} {spread(wall[side])}")
    for side in SIDES:
        print(f"rows/s      {side:<12} {spread(speed[side])}")
    ratio_speed = statistics.median(speed["orchestrate"]) / statistics.median(speed["handwritten"])
    ratio_wall = statistics.median(wall["orchestrate"]) / statistics.median(wall["handwritten"])
    print(f"predict rows/s ratio (orchestrate/hand-written): {ratio_speed:.3f} (target >= 0.9)")
    print(f"wall ratio (orchestrate/hand-written): {ratio_wall:.3f}")
    print(f"reproduce: {sys.executable} benchmarks/predict_vs_map_batches.py --rounds {args.rounds} "
          f"--rows {args.rows} --files {args.files} --batch-size {args.batch_size} "
          f"--workers {args.workers} --train-rows {args.train_rows}")


if __name__ == "__main__":
    main()
