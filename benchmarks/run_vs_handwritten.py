"""`orchestrate run` against a hand-written Ray Train script submitted with `ray job submit`:
one local Ray, the same model, data files, workers and storage folder; the order alternates
every round; each command is timed from start to exit.

    .venv/bin/python benchmarks/run_vs_handwritten.py [--rounds 5] [--rows 2048] [--epochs 2]

Prints each round, then min / median / max of each side and the ratios of the medians: wall
time (target <= 1.10) and training throughput (samples/s in the train loop, last epoch; target
>= 0.97). These machines are noisy: report the medians, with their spread, never one round.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys

from sides import SIDES, bench, run, spread


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache", choices=["auto", "false"], default="auto",
                        help="the experiment's datasets.*.cache; false: the same streaming "
                             "pipeline as the hand-written script, every epoch")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3: one round says nothing on a noisy machine")

    wall: dict[str, list[float]] = {side: [] for side in SIDES}
    speed: dict[str, list[float]] = {side: [] for side in SIDES}
    with bench(args.rows, args.epochs, args.workers) as b:
        b.cache = args.cache if args.cache == "auto" else False
        for i in range(args.rounds):
            # Alternate who goes first, so neither always gets the warmer machine.
            for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                seconds, samples, _ = run(b, side)
                wall[side].append(seconds)
                speed[side].append(samples)
            print(f"round {i}: " + ", ".join(f"{side} {wall[side][-1]:.1f} s {speed[side][-1]:.1f}/s"
                                             for side in SIDES), flush=True)

    print(f"\n{args.rounds} rounds, {args.rows} rows, {args.epochs} epochs, {args.workers} workers, "
          f"cache {args.cache}, "
          f"{platform.node()} ({platform.machine()}, {len(os.sched_getaffinity(0))} cores)")
    for side in SIDES:
        print(f"wall s      {side:<12} {spread(wall[side])}")
    for side in SIDES:
        print(f"samples/s   {side:<12} {spread(speed[side])}")
    ratio_wall = statistics.median(wall["orchestrate"]) / statistics.median(wall["handwritten"])
    ratio_speed = statistics.median(speed["orchestrate"]) / statistics.median(speed["handwritten"])
    print(f"ratio of medians: wall {ratio_wall:.3f} (target <= 1.10), "
          f"throughput {ratio_speed:.3f} (target >= 0.97)")
    print(f"reproduce: {sys.executable} benchmarks/run_vs_handwritten.py --rounds {args.rounds} "
          f"--rows {args.rows} --epochs {args.epochs} --workers {args.workers} --cache {args.cache}")


if __name__ == "__main__":
    main()
