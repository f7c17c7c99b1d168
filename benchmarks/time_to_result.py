"""The time from `run` to a result: the quickstart (MLP on the breast-cancer table, 2 workers,
5 epochs) with orchestrate against the seeds' one-file Ray script, side by side, alternating.

    cold orchestrate    `orchestrate run` with no Ray running (it starts the embedded Ray; the
                        time ends when the command exits; the Ray is stopped after, untimed)
    cold script         `python handwritten_quickstart.py`: ray.init() in-process, TorchTrainer
    warm orchestrate    `orchestrate run --force` on the embedded Ray an earlier run left up
    script, job submit  `ray job submit` of that script to the same running Ray

Each side runs once per round (after a warm-up round that is not counted), medians with spread,
ratios against the cold script. orchestrate's own phase breakdown (`phases` in its results) is
shown as medians per phase. Reproduce:
    python benchmarks/time_to_result.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "handwritten" / "handwritten_quickstart.py"
PHASES = ("submit", "job start", "driver", "data", "workers", "epochs", "shutdown", "results",
          "end")   # `orchestrator.run.phases`, in order (the JSON's keys are sorted)
SIDES = ("cold orchestrate", "cold script", "warm orchestrate", "script, job submit")


class Bench:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.runs = 0
        self.env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
        self.env.update(ORCHESTRATE_HOME=str(work / "home"), RAY_USAGE_STATS_ENABLED="0",
                        ORCHESTRATE_EMBEDDED_RAY_IDLE="30m")
        folder = work / "experiment"
        shutil.copytree(ROOT / "experiments" / "data", folder / "data",
                        ignore=shutil.ignore_patterns("*.parquet", "images*"))
        spec = yaml.safe_load((ROOT / "experiments" / "quickstart.yaml").read_text())
        spec["run_config"]["storage_path"] = str(work / "results")
        (folder / "quickstart.yaml").write_text(yaml.safe_dump(spec))
        self.experiment = folder / "quickstart.yaml"
        self.csv = [str(folder / "data" / f"breast_cancer_{s}.csv") for s in ("train", "valid")]
        self.phases: dict[str, list[dict[str, float]]] = {"cold orchestrate": [],
                                                          "warm orchestrate": []}

    def orchestrate(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=ROOT,
                              env=self.env, capture_output=True, text=True)

    def stop_ray(self) -> None:
        self.orchestrate("stop", "--embedded")

    def ray_env(self) -> dict[str, str]:
        """The running embedded Ray's address and token, for `ray job submit`."""
        sys.path.insert(0, str(ROOT))
        os.environ["ORCHESTRATE_HOME"] = self.env["ORCHESTRATE_HOME"]
        from orchestrator.reach import embedded
        from orchestrator.state import State

        secrets = State.here().secrets
        ray = embedded.current(secrets)
        assert ray is not None, "the embedded Ray is not up"
        return dict(self.env, RAY_ADDRESS=ray.address, **embedded.client_environment(secrets))

    def timed(self, side: str) -> float:
        self.runs += 1
        name = f"hand-{self.runs}"
        if side in ("cold orchestrate", "warm orchestrate"):
            command = [sys.executable, "-m", "orchestrator", "run", str(self.experiment), "-q",
                       "--force", "--format", "json"]
            env = self.env
        elif side == "cold script":
            command = [sys.executable, str(SCRIPT), *self.csv, str(self.work / "results"), name]
            env = self.env
        else:
            command = [str(Path(sys.executable).parent / "ray"), "job", "submit",
                       "--working-dir", str(SCRIPT.parent), "--", "python", SCRIPT.name,
                       *self.csv, str(self.work / "results"), name]
            env = self.ray_env()
        start = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - start
        if done.returncode != 0 or (side == "script, job submit" and "succeeded" not in
                                    (done.stdout + done.stderr).lower()):
            sys.exit(f"{side} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        if side in self.phases:
            self.phases[side].append(json.loads(done.stdout).get("phases") or {})
        return seconds

    def round(self) -> dict[str, float]:
        """One run of each side; the Ray state each needs is made outside the timed part."""
        times = {}
        self.stop_ray()
        times["cold orchestrate"] = self.timed("cold orchestrate")   # leaves the Ray up
        times["warm orchestrate"] = self.timed("warm orchestrate")
        times["script, job submit"] = self.timed("script, job submit")
        self.stop_ray()
        times["cold script"] = self.timed("cold script")
        return times


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f} s ({min(values):.1f}-{max(values):.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="orc-ttr-"))
    bench = Bench(work)
    samples: dict[str, list[float]] = {side: [] for side in SIDES}
    try:
        print("warm-up round (not counted)", flush=True)
        bench.round()
        for side in bench.phases:
            bench.phases[side].clear()
        for number in range(args.rounds):
            times = bench.round()
            print(f"round {number + 1}: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()),
                  flush=True)
            for side, seconds in times.items():
                samples[side].append(seconds)
    finally:
        bench.stop_ray()
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(samples["cold script"])
    print(f"\n{'side':22} {'median (min-max)':>22} {'ratio to the cold script':>26}")
    for side in SIDES:
        values = samples[side]
        ratios = [v / base for v in values]
        print(f"{side:22} {spread(values):>22} {statistics.median(ratios):14.2f}x "
              f"({min(ratios):.2f}-{max(ratios):.2f})")
    warm, submit = samples["warm orchestrate"], samples["script, job submit"]
    print(f"warm orchestrate / the script by `ray job submit` on the same Ray: "
          f"{statistics.median(warm) / statistics.median(submit):.2f}x")
    for side, rows in bench.phases.items():
        names = [n for n in PHASES if rows and n in rows[0]]
        print(f"\n{side}, phases (median s over {len(rows)} runs): " + ", ".join(
            f"{n} {statistics.median(r.get(n, 0.0) for r in rows):.1f}" for n in names))
    print(f"\n{args.rounds} rounds; reproduce: {Path(sys.executable).name} "
          f"benchmarks/time_to_result.py --rounds {args.rounds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
