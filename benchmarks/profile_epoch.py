"""Where a training run's time goes, on both sides: py-spy samples every Ray Train worker from
start to exit (idle stacks included, so waiting counts as time), and psutil records the CPU
time of every process on the machine while the run lasts.

    .venv/bin/python benchmarks/profile_epoch.py [--rounds 2] [--rows 2048] [--epochs 2] [--cache false]

Per side it prints, for the train function's thread: the share of samples in the data iterator,
in forward, backward, the optimizer, reporting/checkpointing and anything else; and the CPU
seconds used by each kind of process (train workers, Ray Data tasks, the driver, Ray's own
daemons, the submitting client). Needs root (py-spy attaches with ptrace).
"""
from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from sides import SIDES, Bench, bench, run

PY_SPY = str(Path(sys.executable).parent / "py-spy")  # installed with ray[default]

# Stack frames -> what the step is doing, first match wins (frames are searched leaf first).
PHASES = (
    ("data", ("iter_torch_batches", "iter_batches", "_from_shard", "streaming_split",
              "next_batch", "get_next")),
    ("backward", ("backward (torch/",)),
    ("optimizer", ("step (torch/optim", "zero_grad (torch/")),
    ("forward", ("_call_impl (torch/", "forward (")),
    ("report", ("report (ray/train", "_report (", "save (torch/", "all_reduce (")),
)
KINDS = (
    ("train worker", ("RayTrainWorker",)),
    ("ray data", ("ReadParquet", "MapBatches", "SplitCoordinator", "ray::_", "Read", "Map")),
    ("train controller", ("TrainController", "Controller")),
    ("driver", ("orchestrator.workload", "handwritten_vit.py")),
    ("client", ("orchestrator run", "job submit")),
    ("starting workers", ("ray::IDLE", "default_worker.py")),
    ("ray actors", ("ray::",)),
    ("ray daemons", ("raylet", "gcs_server", "dashboard", "log_monitor", "runtime_env",
                     "monitor.py", "ray.scripts.scripts", "ray.util.client.server", "forkserver")),
)
GENERIC = ("starting workers", "ray daemons", "other", "gone")


def kind(process: psutil.Process) -> str:
    try:
        line = " ".join(process.cmdline()) or process.name()
    except psutil.Error:
        return "gone"
    return next((k for k, marks in KINDS if any(m in line for m in marks)), "other")


class Watch(threading.Thread):
    """CPU seconds by kind of process while a run lasts; py-spy on each train worker it sees."""

    def __init__(self, folder: Path) -> None:
        super().__init__(daemon=True)
        self.folder, self.stop = folder, threading.Event()
        self.cpu: dict[int, tuple[str, float]] = {}
        self.spies: list[tuple[subprocess.Popen[bytes], Path]] = []

    def run(self) -> None:
        spied: set[int] = set()
        while not self.stop.is_set():
            for process in psutil.process_iter():
                try:
                    times = process.cpu_times()
                    label = kind(process)  # a Ray worker's title changes with its task
                    if label in GENERIC and process.pid in self.cpu:
                        label = self.cpu[process.pid][0]  # keep what it was last seen doing
                    self.cpu[process.pid] = (label, times.user + times.system)
                except psutil.Error:
                    continue
                if label == "train worker" and process.pid not in spied:
                    spied.add(process.pid)
                    out = self.folder / f"worker-{process.pid}.txt"
                    spy = subprocess.Popen([PY_SPY, "record", "--pid", str(process.pid), "--idle",
                                            "--format", "raw", "--rate", "50", "--output", str(out),
                                            "--nonblocking"], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)
                    self.spies.append((spy, out))
            time.sleep(0.3)

    def finish(self, before: dict[int, float]) -> tuple[dict[str, float], collections.Counter[str]]:
        self.stop.set()
        self.join()
        for spy, _ in self.spies:
            try:
                spy.wait(timeout=30)  # py-spy ends when its worker exits
            except subprocess.TimeoutExpired:
                spy.terminate()
                spy.wait()
        cpu: dict[str, float] = collections.defaultdict(float)
        for pid, (label, seconds) in self.cpu.items():
            cpu[label] += seconds - before.get(pid, 0.0)
        phases: collections.Counter[str] = collections.Counter()
        for _, out in self.spies:
            if out.exists():
                phases.update(classify(out.read_text()))
        return dict(cpu), phases


def classify(raw: str) -> collections.Counter[str]:
    """py-spy's raw format: `frame;frame;...;leaf COUNT` per line; only the train function's
    thread (its stack passes through the loop) counts."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.splitlines():
        stack, _, number = line.rpartition(" ")
        if not number.isdigit() or not any(m in stack for m in ("train_loop (", "train_func (")):
            continue
        frames = stack.split(";")[::-1]
        phase = next((p for f in frames for p, marks in PHASES if any(m in f for m in marks)), "other")
        counts[phase] += int(number)
    return counts


def cpu_now() -> dict[int, float]:
    seconds = {}
    for process in psutil.process_iter():
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        seconds[process.pid] = times.user + times.system
    return seconds


def profile(b: Bench, side: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix=f"orc-profile-{side}-"))
    before = cpu_now()
    watch = Watch(folder)
    watch.start()
    seconds, speed, _ = run(b, side)
    cpu, phases = watch.finish(before)
    total = sum(phases.values()) or 1
    print(f"\n{side}: wall {seconds:.1f} s, last epoch {speed:.1f} samples/s "
          f"(py-spy output in {folder})")
    print("  train function's time (both workers, py-spy samples incl. idle):")
    for phase, count in phases.most_common():
        print(f"    {phase:<10} {100 * count / total:5.1f} %")
    print("  CPU seconds by process while it ran:")
    for label, used in sorted(cpu.items(), key=lambda kv: -kv[1]):
        if used >= 0.05:
            print(f"    {label:<16} {used:7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache", choices=["auto", "false"], default="auto",
                        help="the experiment's datasets.*.cache (as in run_vs_handwritten.py)")
    args = parser.parse_args()
    with bench(args.rows, args.epochs, args.workers) as b:
        b.cache = args.cache if args.cache == "auto" else False
        for i in range(args.rounds):
            for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                profile(b, side)


if __name__ == "__main__":
    main()
