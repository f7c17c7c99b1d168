"""What MLflow tracking costs a run: the quickstart (2 workers, 5 epochs) through
`orchestrate run` with `tracking.mlflow` and without it, side by side on one embedded local Ray,
the order alternating each round. Tracking goes to a real `mlflow server` (SQLite backend, on
loopback, from .venv-mlflow as scripts/setup-dev.sh makes it), or with --file-store to a folder.

    .venv/bin/python benchmarks/tracking_overhead.py [--rounds 3] [--file-store]

Prints each side's wall time (min / median / max), the ratio of the medians (target: <= 1.05)
and the spread of each round's own ratio.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import yaml
from sides import ROOT, spread

SIDES = ("untracked", "tracked")


@contextlib.contextmanager
def mlflow_server(folder: Path) -> Iterator[str]:
    from orchestrator.util.ports import free_port

    port = free_port()
    with open(folder / "server.log", "wb") as log:
        process = subprocess.Popen(
            [str(ROOT / ".venv-mlflow" / "bin" / "mlflow"), "server", "--backend-store-uri",
             f"sqlite:///{folder / 'mlflow.db'}", "--artifacts-destination",
             str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
             "--workers", "1"], cwd=folder, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(360):
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(f"{url}/health", timeout=2).close()
                    break
                time.sleep(0.5)
            else:
                sys.exit(f"mlflow server did not start; see {folder / 'server.log'}")
            yield url
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def experiment(work: Path, side: str, number: int, uri: str) -> Path:
    """The quickstart, its data by absolute path, in a folder of its own (a new run name)."""
    document = yaml.safe_load((ROOT / "experiments" / "quickstart.yaml").read_text())
    document["name"] = f"{side}-{number}"
    for split in document["datasets"].values():
        split["path"] = str(ROOT / "experiments" / split["path"])
    document["run_config"]["storage_path"] = str(work / "results")
    if side == "tracked":
        document["tracking"] = {"mlflow": {"tracking_uri": uri, "experiment_name": "bench"}}
    folder = work / f"{side}-{number}"
    folder.mkdir()
    path = folder / "quickstart.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--file-store", action="store_true",
                        help="track to a folder instead of a local `mlflow server`")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from orchestrator.reach import embedded
    from orchestrator.state import State

    work = Path(tempfile.mkdtemp(prefix="orc-bench-tracking-"))
    os.environ["ORCHESTRATE_HOME"] = str(work / "home")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    seconds: dict[str, list[float]] = {side: [] for side in SIDES}
    secrets = State.here().secrets
    with contextlib.ExitStack() as stack:
        uri = (str(work / "mlruns") if args.file_store
               else stack.enter_context(mlflow_server(work)))
        stack.callback(embedded.shutdown, secrets)
        stack.enter_context(embedded.session(secrets, num_cpus=4))
        for number in range(args.rounds):
            for side in SIDES if number % 2 == 0 else SIDES[::-1]:
                path = experiment(work, side, number, uri)
                start = time.monotonic()
                done = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(path),
                                       "--format", "json"], env=env, capture_output=True,
                                      text=True)
                seconds[side].append(time.monotonic() - start)
                if done.returncode != 0:
                    sys.exit(f"{side} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
            print(f"round {number}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in seconds.items()),
                  flush=True)
    where = "a folder" if args.file_store else "a local mlflow server"
    print(f"\nthe quickstart, 5 epochs, {args.rounds} rounds, tracking to {where}:")
    for side, values in seconds.items():
        print(f"  {side:10s} wall s  {spread(values)}")
    ratio = statistics.median(seconds["tracked"]) / statistics.median(seconds["untracked"])
    print(f"  tracked / untracked (medians): {ratio:.3f}x (target <= 1.05)")
    # Each round's two runs ran back to back, so their ratio is less exposed to a machine
    # whose speed drifts over minutes than the ratio of the two medians.
    paired = [t / u for t, u in zip(seconds["tracked"], seconds["untracked"], strict=True)]
    print(f"  tracked / untracked, each round: {spread(paired, digits=3)}")


if __name__ == "__main__":
    main()
