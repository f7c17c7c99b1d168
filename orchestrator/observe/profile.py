"""`orchestrate profile JOB`: a CPU flame graph (SVG), a stack trace and, with `--memory`, a
memory flame graph (HTML) of each Ray Train worker of a running job, asked of its Ray's
dashboard, written to files: the three links the dashboard gives per worker.

    profile_job(endpoint, job_id, folder=..., duration=..., memory=False) -> Profile

The dashboard does the work (Ray 2.60, dashboard/modules/reporter/reporter_head.py): py-spy,
run by the dashboard agent of the worker's node, samples the process (`/worker/cpu_profile`,
`format=flamegraph`) or dumps its threads' stacks (`/worker/traceback`); memray, run by the
same agent, attaches to the process for the duration and renders its allocations as a flame
graph (`/memory_profile`, `format=flamegraph`). memray must be installed where the job runs
(the `[ray]` extra has it) and attaches through gdb. The memory profile is asked after the CPU
profile, not beside it: both tools stop the process to attach. Ray answers all of them 403
unless its head started with RAY_DASHBOARD_ENABLE_PROFILING=1: the cluster file's
`profiling: true`, or, for the embedded Ray, the experiment's (`render.harden.PROFILING_SETTINGS`).
The workers are the job's live `RayTrainWorker` actors, from Ray's state API
(`/api/v0/actors`), Tune trials' too. Every request goes with the token to a listener proven
ours (`util.http`); the token is never written to the files.
"""
from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..errors import JobError
from ..reach.endpoint import EMBEDDED, Endpoint
from ..util import http

T = TypeVar("T")
WORKER_CLASS = "RayTrainWorker"   # Ray Train's worker actor (V1 and V2 alike)
DEFAULT_DURATION = 5              # seconds sampled; Ray takes 1-60 unless its head says more
MAX_DURATION = 60
# Ray's refusal (reporter_head._profiling_disabled_response) names the variable.
DISABLED_MARK = "RAY_DASHBOARD_ENABLE_PROFILING"
ON_A_CLUSTER = ("add `profiling: true` to the cluster file and `orchestrate up` it (Ray "
                "restarts on the head: its running jobs end)")
# Ray's dashboard agent looks memray up on its PATH (profile_manager.MemoryProfilingManager).
NO_MEMRAY_MARK = "memray is not installed"
NO_MEMRAY = ("install memray where the job runs: it comes with orchestrate-ray[ray] (the "
             "embedded Ray's Python), and on a cluster with the nodes' Ray (`pip install memray` "
             "in the image or setup_commands); then profile again")
NO_GDB = ("memray attaches to a running process through gdb: install gdb on the job's nodes "
          "(Debian: `apt-get install gdb`)")
ON_EMBEDDED = ("add `profiling: true` to the experiment file; the embedded Ray must be started "
               "by such a run: when no run uses it, `orchestrate stop --embedded`, then run it "
               "again")


@dataclass(frozen=True)
class Worker:
    actor_id: str
    pid: int
    node_id: str


@dataclass(frozen=True)
class Profiled:
    worker: Worker
    flamegraph: Path | None = None
    stack: Path | None = None
    error: str | None = None    # why one of those asked for is missing
    memory: Path | None = None  # with --memory

    @property
    def files(self) -> list[Path]:
        return [path for path in (self.flamegraph, self.stack, self.memory) if path]

    def as_dict(self) -> dict[str, Any]:
        return {"actor_id": self.worker.actor_id, "pid": self.worker.pid,
                "node_id": self.worker.node_id,
                "flamegraph": str(self.flamegraph) if self.flamegraph else None,
                "stack": str(self.stack) if self.stack else None,
                "memory": str(self.memory) if self.memory else None, "error": self.error}


@dataclass(frozen=True)
class Profile:
    job_id: str
    target: str          # "cluster NAME", "the embedded Ray"
    folder: Path
    duration: int
    workers: tuple[Profiled, ...]
    memory: bool = False

    @property
    def failed(self) -> list[Profiled]:
        return [w for w in self.workers if w.error]

    def as_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "target": self.target, "folder": str(self.folder),
                "duration": self.duration, "memory": self.memory,
                "workers": [w.as_dict() for w in self.workers]}


def profiling_off(endpoint: Endpoint) -> JobError:
    return JobError(f"profiling is off on {endpoint.label}: its dashboard refuses flame graphs "
                    "and stack traces (Ray needs RAY_DASHBOARD_ENABLE_PROFILING=1 on the head)",
                    hint=ON_EMBEDDED if endpoint.via == EMBEDDED else ON_A_CLUSTER)


def _refused(endpoint: Endpoint, exc: http.HttpError, what: str) -> JobError:
    """What a refusal of `what` means for the user."""
    if exc.status == 403 and DISABLED_MARK in str(exc):
        return profiling_off(endpoint)
    if exc.status in (401, 403):
        return JobError(f"{endpoint.label} refused the token asking for {what} ({exc})",
                        hint="the token kept here is not the one its Ray has")
    return JobError(f"{endpoint.label} ({endpoint.address}) did not give {what}: {exc}")


def _get_json(endpoint: Endpoint, path: str, what: str, timeout: float = 30) -> Any:
    try:
        return http.get_json(endpoint.address, path, endpoint.token, timeout=timeout)
    except http.HttpError as exc:
        if exc.status == 404:
            raise
        raise _refused(endpoint, exc, what) from None


def _check_enabled(endpoint: Endpoint) -> None:
    """Ray's own answer to "is profiling on" (absent in Rays before 2.60: then the first
    profile request tells)."""
    try:
        answer = http.get_json(endpoint.address, "/api/profiling_enabled", endpoint.token,
                               timeout=30)
    except http.HttpError as exc:
        if exc.status == 404:
            return
        raise _refused(endpoint, exc, "whether profiling is on") from None
    data = answer.get("data") if isinstance(answer, dict) else None
    if isinstance(data, dict) and data.get("profilingEnabled") is False:
        raise profiling_off(endpoint)


def running_job(endpoint: Endpoint, job_id: str) -> str:
    """The Ray job id (hex) of submission `job_id`, which must be running."""
    try:
        job = _get_json(endpoint, f"/api/jobs/{urllib.parse.quote(job_id, safe='')}",
                        f"job {job_id}")
    except http.HttpError:   # 404
        raise JobError(f"no job {job_id!r} on {endpoint.label}",
                       hint="`orchestrate jobs` lists them") from None
    status = str(job.get("status") or "UNKNOWN") if isinstance(job, dict) else "UNKNOWN"
    if status != "RUNNING":
        why = "waits in the queue" if status == "PENDING" else "has ended"
        raise JobError(f"job {job_id} is not running ({status}): it {why}; only a running "
                       "job's workers can be profiled",
                       hint="`orchestrate logs -f JOB` follows it" if status == "PENDING" else
                       "profile a run while it trains")
    ray_id = job.get("job_id")
    if not isinstance(ray_id, str) or not ray_id:
        raise JobError(f"job {job_id} has no Ray Train workers yet (its driver is starting)",
                       hint="try again in a few seconds")
    return ray_id


def train_workers(endpoint: Endpoint, ray_job_id: str) -> list[Worker]:
    """The job's live Ray Train workers, by node and pid."""
    query = urllib.parse.urlencode([
        ("filter_keys", "job_id"), ("filter_predicates", "="), ("filter_values", ray_job_id),
        ("filter_keys", "class_name"), ("filter_predicates", "="),
        ("filter_values", WORKER_CLASS),
        ("filter_keys", "state"), ("filter_predicates", "="), ("filter_values", "ALIVE"),
        ("limit", "1000")])
    try:
        answer = _get_json(endpoint, f"/api/v0/actors?{query}", "the job's workers")
    except http.HttpError as exc:   # 404: a dashboard without the state API
        raise JobError(f"{endpoint.label} did not list the job's workers ({exc})") from None
    rows = ((answer.get("data") or {}).get("result") or {}).get("result") \
        if isinstance(answer, dict) else None
    workers = [Worker(str(row.get("actor_id")), row["pid"], str(row["node_id"]))
               for row in rows or []
               if isinstance(row, dict) and isinstance(row.get("pid"), int)
               and not isinstance(row.get("pid"), bool) and row["pid"] > 0
               and row.get("node_id")]   # Ray's answer is data: a row without a pid is skipped
    return sorted(workers, key=lambda w: (w.node_id, w.pid))


def _ask(endpoint: Endpoint, route: str, worker: Worker, timeout: float,
         **extra: str) -> bytes:
    query = urllib.parse.urlencode({"pid": worker.pid, "node_id": worker.node_id,
                                    "native": "0", **extra})
    return http.get_bytes(endpoint.address, f"{route}?{query}", endpoint.token, timeout=timeout)


def _memory_hint(text: str) -> str:
    """Ray's words for a memory profile that failed, with what to do where it says."""
    if NO_MEMRAY_MARK in text:
        return f"{text} ({NO_MEMRAY})"
    if "gdb" in text.lower() and ("not found" in text.lower() or "no debugger" in text.lower()):
        return f"{text} ({NO_GDB})"
    return text


def _profile_one(endpoint: Endpoint, worker: Worker, index: int, folder: Path,
                 duration: int, memory: bool = False) -> Profiled:
    stem = f"worker-{index}-pid{worker.pid}"
    found: dict[str, Path] = {}
    errors = []
    asks: list[tuple[str, str, str, dict[str, str], float]] = [
        ("stack", "/worker/traceback", "stack.txt", {}, 60.0),
        ("flamegraph", "/worker/cpu_profile", "svg",
         {"duration": str(duration), "format": "flamegraph"}, duration + 60.0)]
    if memory:   # memray attaches, runs `duration` s, detaches, renders: slower than py-spy
        asks.append(("memory", "/memory_profile", "memory.html",
                     {"duration": str(duration), "format": "flamegraph"}, duration + 120.0))
    for what, route, suffix, extra, timeout in asks:
        try:
            body = _ask(endpoint, route, worker, timeout, **extra)
        except http.HttpError as exc:
            if exc.status in (401, 403):
                raise _refused(endpoint, exc, f"a {what} profile" if what == "memory"
                               else f"a {what}") from None
            said = _first_line(str(exc))
            errors.append(f"{what}: {_memory_hint(said) if what == 'memory' else said}")
            continue
        path = folder / f"{stem}.{suffix}"
        try:
            path.write_bytes(body)
        except OSError as exc:
            errors.append(f"{what}: cannot write {path}: {exc.strerror or exc}")
            continue
        found[what] = path
    return Profiled(worker, found.get("flamegraph"), found.get("stack"),
                    "; ".join(errors) or None, found.get("memory"))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else text


def profile_job(endpoint: Endpoint, job_id: str, *, folder: Path,
                duration: int = DEFAULT_DURATION, memory: bool = False,
                progress: Callable[[str], None] = lambda _: None) -> Profile:
    """Profile every Ray Train worker of running job `job_id` for `duration` seconds (all at
    once), and dump its stacks; with `memory`, then trace its allocations for as long; the
    files go into `folder` (made if missing). JobError when profiling is off, the job is not
    running, or it has no workers yet."""
    if not 1 <= duration <= MAX_DURATION:
        raise JobError(f"--duration {duration} is outside 1-{MAX_DURATION} seconds "
                       "(Ray's dashboard refuses longer)")
    ray_job_id = running_job(endpoint, job_id)
    _check_enabled(endpoint)
    workers = train_workers(endpoint, ray_job_id)
    if not workers:
        raise JobError(f"job {job_id} has no Ray Train workers running yet on {endpoint.label}",
                       hint="they start once the job's driver has placed them: try again in a "
                            "few seconds (`orchestrate logs JOB` shows how far it is)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise JobError(f"cannot make the folder {folder} for the profiles: "
                       f"{exc.strerror or exc}", hint="give --output a folder you can write") \
            from None
    progress(f"profiling {len(workers)} worker{'s' if len(workers) != 1 else ''} of job "
             f"{job_id} for {duration} s" + (", then their memory for as long" if memory else ""))
    done = _each(lambda index, worker: _profile_one(endpoint, worker, index, folder, duration,
                                                    memory), workers)
    return Profile(job_id, endpoint.label, folder, duration, tuple(done), memory)


def _each(ask: Callable[[int, Any], T], items: Sequence[Any], at_once: int = 8) -> list[T]:
    """`ask(index, item)` for every item, `at_once` at a time, in daemon threads: on Ctrl-C
    nothing more is asked and the command ends without waiting for the answers in flight
    (a ThreadPoolExecutor's threads are joined at exit: minutes, with 60 s profiles)."""
    import threading

    answers: list[Any] = [None] * len(items)
    failures: list[BaseException] = []
    slots = threading.Semaphore(at_once)

    def one(index: int) -> None:
        try:
            answers[index] = ask(index, items[index])
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            failures.append(exc)
        finally:
            slots.release()

    threads = []
    for index in range(len(items)):
        slots.acquire()
        if failures:
            break
        thread = threading.Thread(target=one, args=(index,), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)   # short joins: Ctrl-C is seen at once
    if failures:
        raise failures[0]
    return answers


def default_folder(job_id: str, now: float) -> Path:
    """`profile-<job>-<UTC time>` in the current folder."""
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    return Path(f"profile-{re.sub(r'[^A-Za-z0-9_.-]', '_', job_id)}-{stamp}")
