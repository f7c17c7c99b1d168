"""The two sides every training benchmark compares, on one embedded local Ray and one copy of the
data: `orchestrate run EXPERIMENT` and the hand-written Ray Train script (`handwritten_vit.py`)
submitted with `ray job submit`.

Both read the same parquet folders by absolute path and write to the same storage folder, which
lies outside both working_dirs: each run's experiment folder holds only its YAML file, and the
hand-written side ships `benchmarks/handwritten/`, which holds only its script. So no round
uploads more than the one before it.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MODEL = {"image_size": 32, "patch_size": 4, "num_layers": 2, "num_heads": 4, "hidden_dim": 64,
         "mlp_dim": 128, "num_classes": 10}
SIDES = ("orchestrate", "handwritten")


@dataclass
class Bench:
    work: Path
    env: dict[str, str]
    address: str
    rows: int
    epochs: int
    workers: int
    cache: str | bool = "auto"  # the experiment's datasets.*.cache
    runs: int = field(default=0)

    @property
    def batch(self) -> int:  # the tutorial's global batch of 512, over the workers, quartered
        return 512 // self.workers // 4

    def command(self, side: str) -> list[str]:
        """The command line of one run of `side`; every call names a new run."""
        self.runs += 1
        if side == "orchestrate":
            return [sys.executable, "-m", "orchestrator", "run", str(self._experiment()), "-q",
                    "--format", "json"]
        return [str(Path(sys.executable).parent / "ray"), "job", "submit", "--address", self.address,
                "--working-dir", str(ROOT / "benchmarks" / "handwritten"), "--", "python",
                "handwritten_vit.py", str(self.work / "data" / "train"), str(self.work / "data" / "valid"),
                str(self.work / "results"), f"bench-hand-{self.runs}", str(self.workers),
                str(self.epochs), str(self.batch), json.dumps({"name": "vit", "args": MODEL})]

    def _experiment(self) -> Path:
        """A folder of its own per run: the working_dir it ships holds this one file."""
        folder = self.work / f"experiment-{self.runs}"
        folder.mkdir()
        path = folder / "bench.yaml"
        path.write_text(json.dumps({
            "name": f"bench-orc-{self.runs}", "trainer": "torch", "model": {"name": "vit", **MODEL},
            "datasets": {split: {"format": "parquet", "path": str(self.work / "data" / split),
                                 "cache": self.cache} for split in ("train", "valid")},
            "train_loop_config": {"lr": 0.001, "epochs": self.epochs,
                                  "batch_size_per_worker": self.batch},
            "scaling_config": {"num_workers": self.workers},
            "run_config": {"storage_path": str(self.work / "results")}}))
        return path


def throughput(side: str, stdout: str, stderr: str) -> float:
    """Training samples/s of the last epoch, as each side reports it."""
    if side == "orchestrate":
        return float(json.loads(stdout)["metrics"]["samples_per_second"])
    return float(re.findall(r"HANDWRITTEN_THROUGHPUT ([0-9.e+-]+)", stdout + stderr)[-1])


def run(bench: Bench, side: str) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall seconds from start to exit, samples/s, the finished process); exits on failure."""
    command = bench.command(side)
    start = time.monotonic()
    done = subprocess.run(command, env=bench.env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds, throughput(side, done.stdout, done.stderr), done


@contextmanager
def bench(rows: int, epochs: int, workers: int) -> Iterator[Bench]:
    """A scratch folder with the data, and an embedded local Ray both sides submit to."""
    import tempfile

    from orchestrator.reach import embedded
    from orchestrator.state import State
    from tests.workload.synthetic import write_image_parquet

    work = Path(tempfile.mkdtemp(prefix="orc-bench-"))
    os.environ["ORCHESTRATE_HOME"] = str(work / "home")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    write_image_parquet(work / "data" / "train", rows, seed=1, files=4)
    write_image_parquet(work / "data" / "valid", rows // 4, seed=2, files=1)
    secrets = State.here().secrets
    try:
        with embedded.session(secrets) as (ray, _):
            env.update(embedded.client_environment(secrets), RAY_ADDRESS=ray.address)  # token auth
            yield Bench(work, env, ray.address, rows, epochs, workers)
    finally:
        embedded.shutdown(secrets)  # also when a `run --detach` asked to keep it


def spread(values: list[float], digits: int = 1) -> str:
    import statistics

    return (f"min {min(values):8.{digits}f}  median {statistics.median(values):8.{digits}f}  "
            f"max {max(values):8.{digits}f}")
