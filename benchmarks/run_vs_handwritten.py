"""`orchestrate run` against a hand-written Ray Train script submitted with `ray job submit`:
same local Ray, model, data and workers, alternating, each command timed from start to exit.

    .venv/bin/python benchmarks/run_vs_handwritten.py [--rounds 2] [--rows 2048] [--epochs 2]

Prints the wall-time ratio (target <= 1.15) and the training-throughput ratio (samples/s in the
train loop, last epoch; target >= 0.95).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MODEL = {"image_size": 32, "patch_size": 4, "num_layers": 2, "num_heads": 4, "hidden_dim": 64,
         "mlp_dim": 128, "num_classes": 10}


def timed(command: list[str], env: dict) -> tuple[float, str, str]:
    start = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return elapsed, done.stdout, done.stderr


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    from orchestrator import embedded
    from orchestrator.state import State
    from tests.workload.synthetic import write_image_parquet

    work = Path(tempfile.mkdtemp(prefix="orc-bench-"))
    env = dict(os.environ, ORCHESTRATE_HOME=str(work / "home"), RAY_USAGE_STATS_ENABLED="0")
    os.environ["ORCHESTRATE_HOME"] = env["ORCHESTRATE_HOME"]
    write_image_parquet(work / "data" / "train", args.rows, seed=1, files=4)
    write_image_parquet(work / "data" / "valid", args.rows // 4, seed=2, files=1)
    batch = 512 // args.workers // 4
    python, bin_dir = sys.executable, Path(sys.executable).parent
    results = {"orchestrate": [], "handwritten": []}
    secrets = State.here().secrets
    with embedded.session(secrets) as (ray, _):  # both commands use this one Ray
        env.update(embedded.client_environment(secrets), RAY_ADDRESS=ray.address)  # token auth
        for i in range(args.rounds):
            experiment = work / f"bench-{i}.yaml"
            experiment.write_text(json.dumps({
                "name": f"bench-orc-{i}", "trainer": "torch", "model": {"name": "vit", **MODEL},
                "datasets": {"train": {"format": "parquet", "path": "data/train"},
                             "valid": {"format": "parquet", "path": "data/valid"}},
                "train_loop_config": {"lr": 0.001, "epochs": args.epochs,
                                      "batch_size_per_worker": batch},
                "scaling_config": {"num_workers": args.workers},
                "run_config": {"storage_path": str(work / "results")}}))
            def run_orchestrate(experiment=experiment):
                seconds, out, _ = timed([python, "-m", "orchestrator", "run", str(experiment),
                                         "-q", "--format", "json"], env)
                summary = json.loads(out)
                results["orchestrate"].append((seconds, summary["metrics"]["samples_per_second"]))

            def run_handwritten(i=i):
                seconds, out, err = timed([str(bin_dir / "ray"), "job", "submit", "--address",
                                           ray.address, "--working-dir", str(ROOT / "benchmarks"),
                                           "--", "python", "handwritten_vit.py",
                                           str(work / "data" / "train"), str(work / "data" / "valid"),
                                           str(work / "results"), f"bench-hand-{i}",
                                           str(args.workers), str(args.epochs), str(batch),
                                           json.dumps({"name": "vit", "args": MODEL})], env)
                found = re.findall(r"HANDWRITTEN_THROUGHPUT ([0-9.e+-]+)", out + err)
                results["handwritten"].append((seconds, float(found[-1])))

            # Alternate who goes first, so neither always gets the warmer machine.
            order = (run_orchestrate, run_handwritten) if i % 2 == 0 else (run_handwritten, run_orchestrate)
            for step in order:
                step()
            print(f"round {i}: orchestrate {results['orchestrate'][-1]}, "
                  f"handwritten {results['handwritten'][-1]}", flush=True)
    wall = {k: statistics.mean(s for s, _ in v) for k, v in results.items()}
    speed = {k: statistics.mean(t for _, t in v) for k, v in results.items()}
    print(f"wall time   orchestrate {wall['orchestrate']:.1f} s  handwritten "
          f"{wall['handwritten']:.1f} s  ratio {wall['orchestrate'] / wall['handwritten']:.3f} "
          f"(target <= 1.15)")
    print(f"throughput  orchestrate {speed['orchestrate']:.1f}/s  handwritten "
          f"{speed['handwritten']:.1f}/s  ratio {speed['orchestrate'] / speed['handwritten']:.3f} "
          f"(target >= 0.95)")


if __name__ == "__main__":
    main()
