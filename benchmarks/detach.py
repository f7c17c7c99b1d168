"""`orchestrate run --detach` on a live local Ray against `ray job submit --no-wait` of the
hand-written script: each command timed from start to return (validation included on the
orchestrate side), each job stopped before the next round so rounds do not load each other.

    .venv/bin/python benchmarks/detach.py [--rounds 5]

Prints min / median / max per side and the ratio of medians; target: orchestrate's median
<= 1.5 s.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sides import ROOT, SIDES, bench, spread


def stop_job(env: dict[str, str], address: str, job_id: str) -> None:
    """Stop the job, wait until Ray says it stopped, then until the machine is quiet again (a
    stopping job's processes would otherwise slow the next round down)."""
    import psutil

    ray = str(Path(sys.executable).parent / "ray")
    subprocess.run([ray, "job", "stop", "--address", address, job_id], env=env,
                   capture_output=True, text=True, check=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and psutil.cpu_percent(interval=1.0) > 25:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {side: [] for side in SIDES}
    with bench(rows=256, epochs=1, workers=1) as b:
        for i in range(args.rounds):
            for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                command = b.command(side)
                if side == "orchestrate":
                    command += ["--detach"]
                else:
                    command.insert(command.index("submit") + 1, "--no-wait")
                start = time.monotonic()
                done = subprocess.run(command, env=b.env, capture_output=True, text=True)
                seconds[side].append(time.monotonic() - start)
                if done.returncode != 0:
                    sys.exit(f"failed: {' '.join(command)}\n{done.stdout}\n{done.stderr}")
                job_id = (json.loads(done.stdout)["job_id"] if side == "orchestrate" else
                          done.stdout.split("Job '")[1].split("'")[0])
                stop_job(b.env, b.address, job_id)
            print(f"round {i}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in seconds.items()),
                  flush=True)
    print(f"\nsubmit and return, on a live local Ray ({args.rounds} rounds):")
    for side, values in seconds.items():
        print(f"  {side:<12} {spread(values, digits=2)}")
    median = statistics.median(seconds["orchestrate"])
    print(f"orchestrate median {median:.2f} s (target <= 1.5 s); ratio of medians "
          f"{median / statistics.median(seconds['handwritten']):.3f}")
    print(f"reproduce: {sys.executable} {ROOT / 'benchmarks' / 'detach.py'} --rounds {args.rounds}")


if __name__ == "__main__":
    main()
