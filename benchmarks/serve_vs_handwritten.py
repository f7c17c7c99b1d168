"""`orchestrate serve` against a hand-written Ray Serve deployment
(`handwritten/handwritten_serve.py`, deployed with `serve.run`): one embedded local Ray, one Serve
proxy (both applications on its port, on routes of their own), the same checkpoint and fitted
preprocessor, the same replicas, CPUs per replica, max_ongoing_requests and `@serve.batch` size
and wait. orchestrate's side checks a bearer token on every request; the hand-written one has no
authentication.

    .venv/bin/python benchmarks/serve_vs_handwritten.py [--rounds 5] [--concurrency 1,8,32]
        [--requests 1600] [--requests-serial 400] [--replicas 1] [--cpus 1]
        [--max-ongoing-requests 64] [--max-batch-size 32] [--batch-wait-timeout-s 0.01]

Setup (not timed): the breast-cancer CSV split in train / valid; an XGBoost run (StandardScaler
on two columns) with `orchestrate run`; `orchestrate serve` of its best checkpoint; the
hand-written application beside it; both sides checked to give the same answers to the same
records, and warmed up.

Each round, for each concurrency C, each side in turn (who goes first alternates every round):
N requests of one record each (`POST {route}/predict`), from C threads with a keep-alive
connection each (http.client), timed from the first request to the last answer. Prints each
round, then per concurrency min / median / max of requests/s, the median p50 and p99 latency of
each side, and the ratios of the medians orchestrate / hand-written (target for requests/s:
>= 0.8). Non-2xx answers (and connection errors) are counted and printed: there must be none.
These machines are noisy: report the medians, with their spread, never one round.

On the way out, also on error: `orchestrate unserve`, `orchestrate stop --embedded`, the scratch
folder removed, and no raylet or gcs_server of this benchmark's Ray left.
"""
from __future__ import annotations

import argparse
import http.client
import itertools
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sides import ROOT, SIDES, spread

HANDWRITTEN = ROOT / "benchmarks" / "handwritten"
NAMES = {"orchestrate": "bench-orc", "handwritten": "bench-hand"}
ROUTES = {"orchestrate": "/orc", "handwritten": "/hand"}
LABEL = "target"


@dataclass
class Bench:
    work: Path
    env: dict[str, str]            # for orchestrate's commands
    driver_env: dict[str, str]     # for the hand-written driver: ray.init() finds the local Ray
    dashboard: str
    token: str | None              # the local Ray's (for Serve's REST API)
    temp_dir: str                  # the local Ray's; its processes name it
    num_cpus: int
    host: str = ""
    port: int = 0
    headers: dict[str, dict[str, str]] = field(default_factory=dict)  # per side
    records: list[dict[str, Any]] = field(default_factory=list)       # one per request body

    def orchestrate(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        line = [sys.executable, "-m", "orchestrator", *args]
        done = subprocess.run(line, env=self.env, capture_output=True, text=True)
        if check and done.returncode != 0:
            sys.exit(f"failed: {' '.join(line)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done


def own_processes(temp_dir: str) -> list[str]:
    """raylet / gcs_server processes of the Ray whose temp dir is `temp_dir`."""
    found = subprocess.run(["pgrep", "-af", "raylet|gcs_server"], capture_output=True, text=True)
    return [line for line in found.stdout.splitlines() if temp_dir in line]


@contextmanager
def setup() -> Iterator[Bench]:
    """A scratch folder with the data and an ORCHESTRATE_HOME, and the embedded local Ray both
    applications run on; on the way out (also on error) orchestrate's service is removed, the
    local Ray stopped and the folder removed."""
    import pandas as pd

    from orchestrator.reach import embedded
    from orchestrator.state import State
    from tests.workload.synthetic import write_breast_cancer_csv

    work = Path(tempfile.mkdtemp(prefix="orc-bench-serve-"))
    temp_dir = ""
    try:
        os.environ["ORCHESTRATE_HOME"] = str(work / "home")
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        table = pd.read_csv(write_breast_cancer_csv(work / "data" / "all.csv"))
        valid = table.sample(frac=0.2, random_state=0)
        table.drop(valid.index).to_csv(work / "data" / "train.csv", index=False)
        valid.to_csv(work / "data" / "valid.csv", index=False)
        secrets = State.here().secrets
        try:
            with embedded.session(secrets) as (ray, _):
                temp_dir = ray.temp_dir
                driver_env = dict(env, **embedded.client_environment(secrets), RAY_ADDRESS=ray.gcs_address)
                b = Bench(work, env, driver_env, ray.address, ray.endpoint(secrets).token, ray.temp_dir,
                          ray.num_cpus)
                b.records = valid.drop(columns=[LABEL]).to_dict(orient="records")
                try:
                    yield b
                finally:
                    done = b.orchestrate("unserve", NAMES["orchestrate"], check=False)
                    print(f"cleanup: orchestrate unserve {NAMES['orchestrate']}: exit {done.returncode} "
                          f"{(done.stderr or done.stdout).strip()}", flush=True)
                    try:  # the hand-written application must have been left running
                        print(f"cleanup: Serve after unserve: {applications(b)}", flush=True)
                    except Exception as exc:  # noqa: BLE001 - only shown
                        print(f"cleanup: Serve after unserve: no answer ({exc})", flush=True)
                    done = b.orchestrate("stop", "--embedded", check=False)
                    print(f"cleanup: orchestrate stop --embedded: exit {done.returncode} "
                          f"{(done.stderr or done.stdout).strip()}", flush=True)
        finally:
            embedded.shutdown(secrets)  # if the command above could not
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if temp_dir:
            left = own_processes(temp_dir)
            print(f"cleanup: {work} removed; raylet/gcs_server of this benchmark's Ray left: "
                  + ("\n  ".join(["", *left]) if left else "none"), flush=True)


def train(b: Bench) -> tuple[str, Path]:
    """The XGBoost run with `orchestrate run`: its best checkpoint and fitted preprocessor."""
    folder = b.work / "experiment"
    folder.mkdir()
    experiment = folder / "bench-xgb.yaml"
    experiment.write_text(json.dumps({
        "name": "bench-serve-xgb", "trainer": "xgboost",
        "datasets": {split: {"format": "csv", "path": str(b.work / "data" / f"{split}.csv")}
                     for split in ("train", "valid")},
        "label_column": LABEL,
        "preprocessors": [{"type": "StandardScaler", "columns": ["mean radius", "mean texture"]}],
        "params": {"objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
        "num_boost_round": 20,
        "scaling_config": {"num_workers": 1, "use_gpu": False},
        "run_config": {"storage_path": str(b.work / "results")}}))
    start = time.monotonic()
    done = b.orchestrate("run", str(experiment), "-q", "--format", "json")
    checkpoint = json.loads(done.stdout).get("best_checkpoint")
    if not checkpoint or not (Path(checkpoint) / "model.ubj").exists():
        sys.exit(f"the training run left no checkpoint with a model.ubj:\n{done.stdout[-3000:]}")
    preprocessor = Path(checkpoint).parent / "orchestrate" / "preprocessor.bin"
    if not preprocessor.is_file():
        sys.exit(f"the training run left no fitted preprocessor at {preprocessor}")
    print(f"setup: trained in {time.monotonic() - start:.1f} s; checkpoint {checkpoint}", flush=True)
    return str(checkpoint), preprocessor


def deploy(b: Bench, checkpoint: str, preprocessor: Path, args: argparse.Namespace) -> None:
    """orchestrate's service (token, batching), then the hand-written application on the same
    Serve proxy; sets the proxy's address and each side's request headers."""
    service = b.work / "service" / "bench-orc.yaml"
    service.parent.mkdir()
    service.write_text(json.dumps({
        "name": NAMES["orchestrate"], "model": {"checkpoint": checkpoint},
        "route_prefix": ROUTES["orchestrate"], "replicas": args.replicas,
        "resources_per_replica": {"cpus": args.cpus}, "max_ongoing_requests": args.max_ongoing_requests,
        "batching": {"max_batch_size": args.max_batch_size,
                     "batch_wait_timeout_s": args.batch_wait_timeout_s},
        "auth": "token"}))
    start = time.monotonic()
    served = json.loads(b.orchestrate("serve", str(service), "--format", "json").stdout)
    print(f"setup: orchestrate serve: {served['status']} at {served['url']} in "
          f"{time.monotonic() - start:.1f} s", flush=True)
    if not served.get("token"):
        sys.exit(f"orchestrate serve --format json gave no token: {sorted(served)}")
    url = urlsplit(served["url"])
    b.host, b.port = str(url.hostname), int(url.port or 80)
    if url.path.rstrip("/") != ROUTES["orchestrate"]:
        sys.exit(f"orchestrate serves {served['url']}, not on the route {ROUTES['orchestrate']}")
    json_type = {"Content-Type": "application/json"}
    b.headers = {"orchestrate": {**json_type, "Authorization": f"Bearer {served['token']}"},
                 "handwritten": json_type}

    line = [sys.executable, str(HANDWRITTEN / "handwritten_serve.py"), checkpoint, str(preprocessor),
            NAMES["handwritten"], ROUTES["handwritten"], str(args.replicas), str(args.cpus),
            str(args.max_ongoing_requests), str(args.max_batch_size), str(args.batch_wait_timeout_s)]
    start = time.monotonic()
    done = subprocess.run(line, env=b.driver_env, cwd=HANDWRITTEN, capture_output=True, text=True)
    if done.returncode != 0 or "HANDWRITTEN_SERVE" not in done.stdout:
        sys.exit(f"failed: {' '.join(line)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    print(f"setup: hand-written serve.run: RUNNING in {time.monotonic() - start:.1f} s", flush=True)
    print(f"setup: Serve on {b.host}:{b.port}: {applications(b)}", flush=True)


def applications(b: Bench) -> str:
    """Every Serve application's status and route, as Serve's REST API reports them."""
    from orchestrator.util import http as orc_http

    details = orc_http.get_json(b.dashboard, "/api/serve/applications/", b.token, timeout=30)
    port = (details.get("http_options") or {}).get("port")
    apps = details.get("applications") or {}
    return f"proxy port {port}; " + ", ".join(f"{name} {app.get('status')} {app.get('route_prefix')}"
                                              for name, app in sorted(apps.items()))


def post(b: Bench, side: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(b.host, b.port, timeout=60)
    try:
        connection.request("POST", ROUTES[side] + "/predict", body,
                           b.headers[side] if headers is None else headers)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def same_answers(b: Bench, count: int = 50) -> str:
    """Both sides answer the same records with the same predictions and probabilities (to 1e-6),
    in the same shape; orchestrate refuses a request without its token. Exits otherwise."""
    problems = []
    no_token = {"Content-Type": "application/json"}
    status, _ = post(b, "orchestrate", json.dumps(b.records[:1]).encode(), no_token)
    if status != 401:
        problems.append(f"orchestrate answered {status}, not 401, to a request without its token")
    for record in b.records[:count]:
        body = json.dumps([record]).encode()
        answers = {}
        for side in SIDES:
            status, text = post(b, side, body)
            if status != 200:
                sys.exit(f"{side} answered {status} to {body[:200]!r}: {text[:500]!r}")
            answers[side] = json.loads(text)["predictions"]
        orc, hand = answers["orchestrate"], answers["handwritten"]
        if len(orc) != 1 or len(hand) != 1 or sorted(orc[0]) != sorted(hand[0]):
            problems.append(f"different shapes: {orc} and {hand}")
        elif orc[0]["prediction"] != hand[0]["prediction"] or any(
                abs(orc[0][k] - hand[0][k]) > 1e-6 for k in orc[0] if k != "prediction"):
            problems.append(f"different answers: {orc[0]} and {hand[0]}")
        if problems:
            break
    if problems:
        sys.exit("the two sides' answers differ: " + "; ".join(problems))
    return f"{count} records, same predictions and probabilities, columns {', '.join(sorted(orc[0]))}"


@dataclass
class Result:
    rate: float                          # requests/s
    p50: float                           # ms
    p99: float                           # ms
    failed: Counter[str]                 # non-2xx status (or connection error) -> count
    sample: str = ""                     # one failed answer, for the report


def percentile(ordered: list[float], q: float) -> float:
    """Nearest rank of `q` (0..100) in an ascending list."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def load(b: Bench, side: str, requests: int, concurrency: int) -> Result:
    """`requests` POSTs of one record each from `concurrency` threads, each with its own
    keep-alive connection (opened before the clock starts); the records are taken in turn."""
    bodies = [json.dumps([r]).encode() for r in b.records]
    path, headers = ROUTES[side] + "/predict", b.headers[side]
    counter = itertools.count()
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    failed: Counter[str] = Counter()
    samples: list[str] = []
    ready = threading.Barrier(concurrency + 1)

    def worker(k: int) -> None:
        connection = http.client.HTTPConnection(b.host, b.port, timeout=60)
        connection.connect()
        ready.wait()
        mine = latencies[k]
        while (i := next(counter)) < requests:
            start = time.perf_counter()
            try:
                connection.request("POST", path, bodies[i % len(bodies)], headers)
                answer = connection.getresponse()
                text = answer.read()
                status = str(answer.status)
                ok = 200 <= answer.status < 300
            except (OSError, http.client.HTTPException) as exc:
                status, text, ok = type(exc).__name__, str(exc).encode(), False
                connection.close()
                connection = http.client.HTTPConnection(b.host, b.port, timeout=60)
            mine.append(time.perf_counter() - start)
            if not ok:
                failed[status] += 1
                if not samples:
                    samples.append(f"{status} {text[:300]!r}")
        connection.close()

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(concurrency)]
    for thread in threads:
        thread.start()
    ready.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    ordered = sorted(x for mine in latencies for x in mine)
    return Result(requests / seconds, percentile(ordered, 50) * 1000, percentile(ordered, 99) * 1000,
                  failed, samples[0] if samples else "")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", default="1,8,32", help="client threads, comma-separated")
    parser.add_argument("--requests", type=int, default=1600, help="requests per side and round, C > 1")
    parser.add_argument("--requests-serial", type=int, default=400, help="requests per side and round, C = 1")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--cpus", type=float, default=1.0, help="CPUs per replica")
    parser.add_argument("--max-ongoing-requests", type=int, default=64)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--batch-wait-timeout-s", type=float, default=0.01)
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3: one round says nothing on a noisy machine")
    try:
        levels = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        parser.error(f"--concurrency: comma-separated whole numbers, not {args.concurrency!r}")
    if min(levels + [args.requests, args.requests_serial, args.replicas, args.max_ongoing_requests,
                     args.max_batch_size]) < 1 or args.cpus <= 0 or args.batch_wait_timeout_s < 0:
        parser.error("the counts and --cpus must be above 0, --batch-wait-timeout-s at least 0")

    results: dict[tuple[int, str], list[Result]] = {(c, side): [] for c in levels for side in SIDES}
    with setup() as b:
        if 2 * args.replicas * args.cpus > b.num_cpus:
            sys.exit(f"two sides of {args.replicas} replica(s) of {args.cpus} CPUs do not fit in the "
                     f"local Ray's {b.num_cpus} CPUs")
        checkpoint, preprocessor = train(b)
        deploy(b, checkpoint, preprocessor, args)
        print(f"answers: {same_answers(b)}", flush=True)
        for side in SIDES:  # warm-up, not counted
            load(b, side, 200, max(levels))
        for i in range(args.rounds):
            # Alternate who goes first, so neither always gets the warmer machine.
            order = SIDES if i % 2 == 0 else SIDES[::-1]
            for c in levels:
                for side in order:
                    requests = args.requests_serial if c == 1 else args.requests
                    results[c, side].append(load(b, side, requests, c))
                print(f"round {i} C={c:<3} " + "  ".join(
                    f"{side} {r.rate:7.1f} req/s p50 {r.p50:6.2f} ms p99 {r.p99:6.2f} ms "
                    f"non-2xx {sum(r.failed.values())}"
                    for side in SIDES for r in [results[c, side][-1]]), flush=True)
        cpus = b.num_cpus

    print(f"\n{args.rounds} rounds; {args.requests_serial} requests at C=1, {args.requests} at C>1, one "
          f"record each; {args.replicas} replica(s) of {args.cpus:g} CPU, max_ongoing_requests "
          f"{args.max_ongoing_requests}, batch {args.max_batch_size} / {args.batch_wait_timeout_s:g} s; "
          f"local Ray of {cpus} CPUs; {platform.node()} ({platform.machine()}, "
          f"{len(os.sched_getaffinity(0))} cores, Python {platform.python_version()})")
    failures = []
    for c in levels:
        for side in SIDES:
            rs = results[c, side]
            print(f"C={c:<3} req/s  {side:<12} {spread([r.rate for r in rs])}   "
                  f"p50 ms median {statistics.median(r.p50 for r in rs):6.2f}   "
                  f"p99 ms median {statistics.median(r.p99 for r in rs):6.2f}")
            failed = sum((r.failed for r in rs), Counter[str]())
            if failed:
                failures.append(f"C={c} {side}: {dict(failed)}; e.g. "
                                + next(r.sample for r in rs if r.sample))
    for c in levels:
        orc, hand = results[c, "orchestrate"], results[c, "handwritten"]

        def ratio(key: str, orc: list[Result] = orc, hand: list[Result] = hand) -> float:
            medians = [statistics.median(float(getattr(r, key)) for r in rs) for rs in (orc, hand)]
            return medians[0] / medians[1]

        print(f"C={c:<3} ratios orchestrate/hand-written: req/s {ratio('rate'):.3f} (target >= 0.8)  "
              f"p50 {ratio('p50'):.3f}  p99 {ratio('p99'):.3f}")
    print("non-2xx answers: " + ("; ".join(failures) if failures else "none"))
    print(f"reproduce: {sys.executable} benchmarks/serve_vs_handwritten.py --rounds {args.rounds} "
          f"--concurrency {args.concurrency} --requests {args.requests} --requests-serial "
          f"{args.requests_serial} --replicas {args.replicas} --cpus {args.cpus:g} --max-ongoing-requests "
          f"{args.max_ongoing_requests} --max-batch-size {args.max_batch_size} --batch-wait-timeout-s "
          f"{args.batch_wait_timeout_s:g}")
    if failures:
        sys.exit("some requests failed (see non-2xx answers above)")


if __name__ == "__main__":
    main()
