"""Cold start of `orchestrate validate` / `render` against the floor: importing yaml + jsonschema.

Each command runs as a fresh process, alternating, and the medians are compared; the target is
validate of one cluster file at 1.2x the floor or below (tests/test_cold_start.py keeps the list
of modules it imports):
    python benchmarks/cold_start.py [--runs 15]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = {
    "baseline: import yaml, jsonschema": [sys.executable, "-c", "import yaml, jsonschema"],
    "orchestrate validate one.yaml": [sys.executable, "-m", "orchestrator", "validate",
                                      "cluster_configs/aws-gpu.yaml"],
    "orchestrate validate experiment.yaml": [sys.executable, "-m", "orchestrator", "validate",
                                             "experiments/quickstart.yaml"],
    "orchestrate render cluster.yaml": [sys.executable, "-m", "orchestrator", "render",
                                        "cluster_configs/aws-gpu.yaml"],
    "orchestrate render experiment.yaml": [sys.executable, "-m", "orchestrator", "render",
                                           "experiments/quickstart.yaml"],
}


# As installed by pip: bytecode is cached (the warm-up run writes it).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def time_once(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, env=ENV, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for command in COMMANDS.values():  # warm the OS file cache once
        time_once(command)
    for _ in range(args.runs):
        for name, command in COMMANDS.items():
            samples[name].append(time_once(command))
    baseline = statistics.median(samples["baseline: import yaml, jsonschema"])
    print(f"{'command':40} {'min ms':>8} {'median ms':>10} {'max ms':>8} {'ratio':>7}")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:40} {min(values) * 1000:8.1f} {median * 1000:10.1f} {max(values) * 1000:8.1f} "
              f"{median / baseline:7.2f}")
    print(f"ratio: median / the baseline's median, {args.runs} runs each; reproduce: "
          f"{sys.executable} benchmarks/cold_start.py --runs {args.runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
