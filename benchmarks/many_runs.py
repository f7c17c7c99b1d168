"""Load: N small experiments started at once against the same N run one after another, on one
warm embedded Ray. Does it keep up, does anything deadlock, is any run lost?

The experiments: the quickstart (`experiments/quickstart.yaml`, an MLP on the breast-cancer
CSVs) with 1 worker and 1 epoch, each with a learning rate and a name of its own (so a
submission id of its own), all in one folder (one working_dir, shipped once). One embedded Ray
(ORCHESTRATE_HOME in a temporary folder, ORCHESTRATE_EMBEDDED_RAY_IDLE=30m), started by an untimed
warm-up run, serves every side; it is stopped at the end. For each N (`--sizes`) and round:

    together      N `orchestrate run -q --force EXP_i.yaml` started at the same moment, each
                  following its job to its results; timed until the last one exits
    one by one    the same N runs, each started when the one before exited
    hand-written  N `ray job submit --no-wait` at once of `handwritten/handwritten_quickstart.py`
                  (a TorchTrainer, 1 worker, 1 epoch, its own lr) to the same Ray, timed until
                  Ray's job list says every one ended; only for N in --handwritten-sizes

`--force` on every run: an experiment unchanged since it was submitted is found, not run again.
While a side runs, Ray's job list (`GET /api/jobs/`) is read twice a second for the peak of
jobs RUNNING at once (and PENDING: accepted, their driver not started yet; every job is, for a
moment, and a job queued for resources stays so). A side that does not end in time
(`--timeout`, default 900 s; one by one: each run; hand-written: max(180 s, 3 x that round's
together time) unless --handwritten-timeout) has its jobs stopped and is reported "did not
finish in T s" with how many were still RUNNING; it is not tried again for that N or a larger
one. A failed run is reported with the tail of its output and its round left out of the
medians; the exit code is 1 then. Between sides the Ray is left to go quiet (no job running,
the CPU below 25 %, at most 30 s). Prints per N the median (min-max) of each side over the
rounds, together / one by one, runs per minute and the peak running. Reproduce:

    python benchmarks/many_runs.py [--sizes 1,5,10,20] [--rounds 3] [--handwritten-sizes 1,5]
    python benchmarks/many_runs.py --quick    # sizes 1,2 (hand-written too), one round
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SCRIPT = ROOT / "benchmarks" / "handwritten" / "handwritten_quickstart.py"
SIDES = ("together", "one by one", "hand-written")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
POLL = 0.5           # seconds between readings of Ray's job list
TAIL = 40            # lines of a failed run's output shown


@dataclass
class Outcome:
    seconds: float
    failures: list[str] = field(default_factory=list)   # per failed run: what, why, its tail
    timed_out: bool = False
    unfinished: int = 0       # jobs still RUNNING when the time was up
    peak_running: int = 0
    peak_pending: int = 0


def tail(text: str) -> str:
    return "\n".join("      " + line for line in text.rstrip().splitlines()[-TAIL:])


class Watch:
    """Reads Ray's job list every POLL seconds while a side runs: the latest status of every
    submitted job, and the most RUNNING and PENDING at once."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        bench.endpoint()   # found here, not in the thread
        self.statuses: dict[str, str] = {}
        self.peak_running = self.peak_pending = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            statuses = self.bench.statuses()
            if statuses is not None:
                self.statuses = statuses
                values = list(statuses.values())
                self.peak_running = max(self.peak_running, values.count("RUNNING"))
                self.peak_pending = max(self.peak_pending, values.count("PENDING"))
            if self._stop.wait(POLL):
                return

    def outcome(self, seconds: float, failures: list[str]) -> Outcome:
        return Outcome(seconds, failures, peak_running=self.peak_running,
                       peak_pending=self.peak_pending)


class Bench:
    def __init__(self, work: Path, count: int) -> None:
        self.work = work
        # ORCHESTRATE_HOME for the runs and for this process's own reads of the embedded Ray
        os.environ["ORCHESTRATE_HOME"] = str(work / "home")
        self.env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        self.env.update(RAY_USAGE_STATS_ENABLED="0", ORCHESTRATE_EMBEDDED_RAY_IDLE="30m")
        folder = work / "experiments"
        shutil.copytree(ROOT / "experiments" / "data", folder / "data",
                        ignore=shutil.ignore_patterns("*.parquet", "images*"))
        base = yaml.safe_load((ROOT / "experiments" / "quickstart.yaml").read_text())
        self.experiments: list[Path] = []
        self.rates: list[float] = []
        for index in range(count):   # all written before the warm-up: one working_dir for all
            spec = copy.deepcopy(base)
            self.rates.append(round(0.01 + 0.0001 * index, 6))
            spec["name"] = f"many-{index + 1:02d}"
            spec["train_loop_config"].update(epochs=1, lr=self.rates[-1])
            spec["scaling_config"]["num_workers"] = 1
            spec["run_config"]["storage_path"] = str(work / "results")
            path = folder / f"{spec['name']}.yaml"
            path.write_text(yaml.safe_dump(spec))
            self.experiments.append(path)
        self.csv = [str(folder / "data" / f"breast_cancer_{s}.csv") for s in ("train", "valid")]
        self.logs = work / "logs"
        self.logs.mkdir()
        self.started = 0
        self.live: list[subprocess.Popen[bytes]] = []
        self._endpoint: Any = None

    # -- the embedded Ray, read in this process --------------------------------------------
    def ray(self) -> Any:
        from orchestrator.reach import embedded
        from orchestrator.state import State

        return embedded.current(State.here().secrets)

    def endpoint(self) -> Any:
        if self._endpoint is None:
            from orchestrator.state import State

            ray = self.ray()
            if ray is None:
                sys.exit("the embedded Ray is not up after the warm-up run")
            self._endpoint = ray.endpoint(State.here().secrets)
        return self._endpoint

    def ray_env(self) -> dict[str, str]:
        """The environment `ray job submit` needs for the embedded Ray: address and token."""
        from orchestrator.reach import embedded
        from orchestrator.state import State

        return dict(self.env, RAY_ADDRESS=self.endpoint().address,
                    **embedded.client_environment(State.here().secrets))

    def statuses(self) -> dict[str, str] | None:
        """Every submitted job's status by submission id; None when the Ray did not answer."""
        from orchestrator.util import http

        endpoint = self.endpoint()
        try:
            jobs = http.get_json(endpoint.address, "/api/jobs/", endpoint.token, timeout=10)
        except http.HttpError:
            return None
        return {job["submission_id"]: job["status"] for job in jobs
                if job.get("type") == "SUBMISSION" and job.get("submission_id")}

    def job_log(self, job_id: str) -> str:
        from orchestrator.util import http

        endpoint = self.endpoint()
        try:
            answer = http.get_json(endpoint.address, f"/api/jobs/{job_id}/logs", endpoint.token,
                                   timeout=30)
        except http.HttpError as exc:
            return f"(its log could not be read: {exc})"
        return str(answer.get("logs", ""))

    def stop_jobs(self) -> None:
        """Stop every job not ended (what `ray job stop` does), and wait until Ray says so."""
        from orchestrator.util import http

        endpoint = self.endpoint()
        deadline = time.monotonic() + 120
        asked: set[str] = set()
        while time.monotonic() < deadline:
            statuses = self.statuses()
            going = [j for j, s in (statuses or {}).items() if s not in TERMINAL]
            if statuses is not None and not going:
                return
            for job_id in set(going) - asked:
                try:
                    http.send_json(endpoint.address, f"/api/jobs/{job_id}/stop", endpoint.token,
                                   None, method="POST")
                except http.HttpError as exc:
                    print(f"    could not stop {job_id}: {exc}", flush=True)
                asked.add(job_id)
            time.sleep(1)
        print("    some jobs did not stop within 120 s", flush=True)

    def settle(self) -> None:
        """Until no job runs and the machine is quiet (at most 30 s), so sides do not overlap."""
        import psutil

        self.stop_jobs()   # nothing should be left; a side that failed may have left some
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and psutil.cpu_percent(interval=1.0) > 25:
            pass

    # -- processes ------------------------------------------------------------------------
    def start(self, command: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
        """`command` started, its output (both streams) to a file of its own."""
        self.started += 1
        log = self.logs / f"{self.started:04d}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out,
                                       stderr=subprocess.STDOUT)
        self.live.append(process)
        return process, log

    def run_command(self, index: int) -> list[str]:
        return [sys.executable, "-m", "orchestrator", "run", str(self.experiments[index]), "-q",
                "--force"]

    def orchestrate(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=ROOT,
                              env=self.env, capture_output=True, text=True)

    def give_up(self, processes: list[subprocess.Popen[bytes]], timeout: float,
                watch: Watch) -> Outcome:
        """The time is up: the commands interrupted (`run` leaves its job running and says
        so), their jobs stopped; how many were still RUNNING."""
        running = list((self.statuses() or watch.statuses).values()).count("RUNNING")
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.stop_jobs()
        outcome = watch.outcome(timeout, [])
        outcome.timed_out, outcome.unfinished = True, running
        return outcome

    def failed(self, what: str, process: subprocess.Popen[bytes], log: Path) -> list[str]:
        if process.returncode == 0:
            return []
        return [f"{what}: exit {process.returncode}\n{tail(log.read_text(errors='replace'))}"]

    # -- the sides ------------------------------------------------------------------------
    def together(self, n: int, timeout: float) -> Outcome:
        with Watch(self) as watch:
            begin = time.monotonic()
            started = [self.start(self.run_command(i), self.env) for i in range(n)]
            for process, _ in started:
                try:
                    process.wait(max(0.0, begin + timeout - time.monotonic()))
                except subprocess.TimeoutExpired:
                    return self.give_up([p for p, _ in started], timeout, watch)
            seconds = time.monotonic() - begin
        failures = [f for i, (p, log) in enumerate(started)
                    for f in self.failed(f"run {self.experiments[i].name}", p, log)]
        return watch.outcome(seconds, failures)

    def one_by_one(self, n: int, timeout: float) -> Outcome:
        failures: list[str] = []
        with Watch(self) as watch:
            begin = time.monotonic()
            for i in range(n):
                process, log = self.start(self.run_command(i), self.env)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    return self.give_up([process], timeout, watch)
                failures += self.failed(f"run {self.experiments[i].name}", process, log)
            seconds = time.monotonic() - begin
        return watch.outcome(seconds, failures)

    def handwritten(self, n: int, timeout: float) -> Outcome:
        env = self.ray_env()
        ray = str(Path(sys.executable).parent / "ray")
        ids = [f"hand-{self.started + 1}-{i + 1}" for i in range(n)]
        failures: list[str] = []
        with Watch(self) as watch:
            begin = time.monotonic()
            submits = [self.start([ray, "job", "submit", "--no-wait", "--submission-id", job_id,
                                   "--working-dir", str(SCRIPT.parent), "--", "python",
                                   SCRIPT.name, *self.csv, str(self.work / "results"), job_id,
                                   "1", "1", str(self.rates[i])], env)
                       for i, job_id in enumerate(ids)]
            for job_id, (process, log) in zip(ids, submits, strict=True):
                try:
                    process.wait(max(0.0, begin + timeout - time.monotonic()))
                except subprocess.TimeoutExpired:
                    return self.give_up([p for p, _ in submits], timeout, watch)
                failures += self.failed(f"ray job submit {job_id}", process, log)
            submitted = [j for j, (p, _) in zip(ids, submits, strict=True) if p.returncode == 0]
            while any(watch.statuses.get(j) not in TERMINAL for j in submitted):
                if time.monotonic() > begin + timeout:
                    return self.give_up([], timeout, watch)
                time.sleep(POLL / 2)
            seconds = time.monotonic() - begin
            statuses = dict(watch.statuses)
        for job_id in submitted:
            if statuses[job_id] != "SUCCEEDED":
                failures.append(f"job {job_id}: {statuses[job_id]}\n{tail(self.job_log(job_id))}")
        return watch.outcome(seconds, failures)

    # -- set-up and tear-down ---------------------------------------------------------------
    def warm_up(self, handwritten: bool) -> None:
        """One run of each kind, untimed: the embedded Ray started, the working_dirs shipped."""
        done = self.orchestrate("run", str(self.experiments[0]), "-q", "--force")
        if done.returncode != 0:
            sys.exit(f"the warm-up run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        if handwritten:
            outcome = self.handwritten(1, 600)
            if outcome.failures or outcome.timed_out:
                sys.exit("the hand-written warm-up job failed:\n" + "\n".join(outcome.failures))
        self.settle()

    def close(self) -> None:
        for process in self.live:
            if process.poll() is None:
                process.kill()
                process.wait()
        self.orchestrate("stop", "--embedded")


def sizes(text: str) -> list[int]:
    if text.strip().lower() == "none":
        return []
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: positive whole numbers, comma-separated "
                                         f"(or none)")
    return sorted(set(values))


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f} s ({min(values):.1f}-{max(values):.1f})"


def report(n: int, results: dict[str, list[Outcome]], skipped: dict[str, str]) -> bool:
    """Prints N's lines; True when every round of every side finished without a failure."""
    clean = True
    print(f"\nN = {n}")
    good: dict[str, list[Outcome]] = {}
    for side in SIDES:
        outcomes = results.get(side, [])
        if side in skipped:
            print(f"  {side:13} {skipped[side]}")
        if not outcomes:
            continue
        good[side] = [o for o in outcomes if not o.failures and not o.timed_out]
        clean = clean and len(good[side]) == len(outcomes)
        peak = (f"peak {max(o.peak_running for o in outcomes)} running, "
                f"{max(o.peak_pending for o in outcomes)} pending")
        if good[side]:
            median = statistics.median(o.seconds for o in good[side])
            print(f"  {side:13} {spread([o.seconds for o in good[side]]):>22}  "
                  f"{n / median * 60:6.1f} runs/min  {peak}"
                  + (f"  ({len(good[side])} of {len(outcomes)} rounds)"
                     if len(good[side]) < len(outcomes) else ""))
        else:
            print(f"  {side:13} {'no round finished':>22}  {peak}")
        for number, outcome in enumerate(outcomes, 1):
            if outcome.timed_out:
                print(f"    round {number}: did not finish in {outcome.seconds:.0f} s, "
                      f"{outcome.unfinished} still RUNNING")
            for failure in outcome.failures[:5]:
                print(f"    round {number}, failed: {failure}")
            if len(outcome.failures) > 5:
                print(f"    round {number}: {len(outcome.failures) - 5} more failed")
    for side in ("one by one", "hand-written"):
        if good.get("together") and good.get(side):
            ratio = (statistics.median(o.seconds for o in good["together"])
                     / statistics.median(o.seconds for o in good[side]))
            print(f"  together / {side}: {ratio:.2f}x")
    return clean


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=sizes, default=None, help="N, comma-separated (1,5,10,20)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per N (3)")
    parser.add_argument("--handwritten-sizes", type=sizes, default=None,
                        help="the N the hand-written side runs for (1,5)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds a side may take (one by one: each run) before it is stopped")
    parser.add_argument("--handwritten-timeout", type=float, default=None,
                        help="seconds for the hand-written side (max(180, 3 x together))")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke check: sizes 1,2 (hand-written too), one round")
    args = parser.parse_args()
    quick = ([1, 2], 1, [1, 2]) if args.quick else ([1, 5, 10, 20], 3, [1, 5])
    ns = args.sizes if args.sizes is not None else quick[0]
    rounds = args.rounds if args.rounds is not None else quick[1]
    hand = args.handwritten_sizes if args.handwritten_sizes is not None else quick[2]
    hand_ns = [n for n in hand if n in ns]
    if not ns:
        parser.error("--sizes: at least one N")
    if rounds < 1:
        parser.error("--rounds: at least 1")

    work = Path(tempfile.mkdtemp(prefix="orc-many-"))
    bench = Bench(work, max(ns))
    results: dict[int, dict[str, list[Outcome]]] = {n: {} for n in ns}
    skipped: dict[int, dict[str, str]] = {n: {} for n in ns}
    gave_up: dict[str, int] = {}   # side -> the N it did not finish at
    cpus = "?"
    try:
        print("warm-up (not counted)", flush=True)
        bench.warm_up(handwritten=bool(hand_ns))
        ray = bench.ray()
        cpus = str(ray.num_cpus) if ray is not None else "?"
        for n in ns:
            for number in range(rounds):
                together_time = args.timeout
                # together and one by one alternate; hand-written follows together (its timeout)
                order = (["together", "hand-written", "one by one"] if number % 2 == 0 else
                         ["one by one", "together", "hand-written"])
                times = []
                for side in order:
                    if side == "hand-written" and n not in hand_ns:
                        continue
                    if side in gave_up:
                        skipped[n][side] = f"not run: did not finish at N = {gave_up[side]}"
                        continue
                    if side == "together":
                        outcome = bench.together(n, args.timeout)
                        if not outcome.timed_out:
                            together_time = outcome.seconds
                    elif side == "one by one":
                        outcome = bench.one_by_one(n, args.timeout)
                    else:
                        outcome = bench.handwritten(n, args.handwritten_timeout
                                                    or max(180.0, 3 * together_time))
                    results[n].setdefault(side, []).append(outcome)
                    if outcome.timed_out:
                        gave_up[side] = n
                    state = ("did not finish" if outcome.timed_out else
                             f"{len(outcome.failures)} failed" if outcome.failures else "ok")
                    times.append(f"{side} {outcome.seconds:.1f} s ({state}, "
                                 f"peak {outcome.peak_running} running)")
                    bench.settle()
                print(f"N = {n}, round {number + 1}: " + (", ".join(times) or "every side skipped"),
                      flush=True)
    finally:
        bench.close()
        shutil.rmtree(work, ignore_errors=True)
    clean = all([report(n, results[n], skipped[n]) for n in ns])
    load = " / ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"\nmachine: {os.cpu_count()} cores ({platform.machine()}), the embedded Ray sized to "
          f"{cpus} CPUs; load average at the end {load} (1 / 5 / 15 min); {rounds} "
          f"round{'s' if rounds > 1 else ''} per N")
    print(f"reproduce: {Path(sys.executable).name} benchmarks/many_runs.py "
          f"--sizes {','.join(map(str, ns))} --rounds {rounds} "
          f"--handwritten-sizes {','.join(map(str, hand_ns)) or 'none'} --timeout {args.timeout:g}"
          + (f" --handwritten-timeout {args.handwritten_timeout:g}" if args.handwritten_timeout else ""))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
