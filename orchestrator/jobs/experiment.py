"""Running an experiment: where its job goes, submitting it once, following it, its results.

    plan = prepare(spec, options, progress)            # rendered before Ray is touched
    with target(spec, state, keep=detach, progress=...) as (jobs, cluster): ...
    submission = submit(plan, spec, jobs, state, cluster, options)
    status = jobs.follow(job_id, epoch_printer(quiet, progress))
    summary = results(jobs, job_id, status, ...)      # JobError when the job failed

Without `cluster:` the job goes to the embedded local Ray (started for the run, stopped after it,
or reused if one is up). The submission id comes from the experiment's content: an unchanged
experiment finds the job it already started instead of starting it twice (`force`: run again).
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import contract
from ..contract import JobConfig
from ..errors import JobError, Problem, SpecError
from ..language.experiment import ExperimentSpec
from ..reach import embedded
from ..render.experiment import JobPlan, render_job, ship
from ..state import ClusterRecord, State
from ..util import workdir
from ..util.progress import Progress
from ..util.text import size_text
from ..util.uris import is_uri
from .client import JobsClient
from .targets import jobs_on, recorded_cluster

TAIL = 25  # log lines shown when a job fails


@dataclass(frozen=True)
class RunOptions:
    detach: bool = False
    force: bool = False           # submit even if this exact experiment was submitted
    resume: bool = False          # continue the run from its latest checkpoint
    quiet: bool = False           # epochs only, not the job's whole log


@dataclass(frozen=True)
class Submission:
    job_id: str
    created: bool                 # False: the same job existed already; nothing was started
    plan: JobPlan[JobConfig]
    cluster: str | None           # the cluster's name; None: the embedded local Ray


@contextlib.contextmanager
def target(spec: ExperimentSpec, state: State, *, keep: bool,
           progress: Progress) -> Iterator[tuple[JobsClient, str | None]]:
    """Jobs on the experiment's cluster, or on the embedded local Ray (kept up if `keep`)."""
    record = None
    if spec.cluster is not None:
        record = recorded_cluster(state, name=spec.cluster.name, file=spec.cluster.path)
    num_workers = int((spec.document.get("scaling_config") or {}).get("num_workers", 1))
    with open_target(record, state, keep=keep, progress=progress,
                     num_cpus=None if num_workers < 3 else num_workers + 2) as found:
        yield found


@contextlib.contextmanager
def open_target(record: ClusterRecord | None, state: State, *, keep: bool, progress: Progress,
                num_cpus: int | None = None) -> Iterator[tuple[JobsClient, str | None]]:
    """Jobs on `record`'s cluster, or on the embedded local Ray (started with `num_cpus` if it
    is not up; kept up after if `keep`)."""
    if record is not None:
        with jobs_on(record, state) as jobs:
            yield jobs, record.name
        return
    with embedded.session(state.secrets, num_cpus=num_cpus, keep=keep) as (ray, started):
        progress(f"{'started' if started else 'using'} a local Ray ({ray.address})")
        yield JobsClient(ray.endpoint(state.secrets)), None


def prepare(spec: ExperimentSpec, options: RunOptions, progress: Progress) -> JobPlan[JobConfig]:
    """The job to submit, rendered before any Ray is started; says how much of the working_dir
    it ships, warns when that is more than code usually is, refuses what Ray would refuse."""
    shipped = ship(spec)
    size = f"{len(shipped.files)} files, {size_text(shipped.size)}"

    def hint() -> str:
        largest = ", ".join(f"{name} {size_text(count)}" for name, count in shipped.largest())
        return (f"leave out data and results with runtime_env.excludes (gitignore patterns) or "
                f"a .rayignore file in {shipped.root}; largest: {largest}")

    if shipped.zip_size >= workdir.ray_limit():  # Ray's own rule
        message = (f"{shipped.root} would ship {size}: more than Ray accepts for a job "
                   f"({size_text(workdir.ray_limit())})")
        raise SpecError([spec.source.problem(("working_dir",), message, hint()) if spec.source
                         else Problem(str(spec.path), message, field="working_dir", hint=hint())])
    check_environment(spec, shipped, progress)
    progress(f"shipping {shipped.root} as the job's working_dir: {size}")
    if shipped.size >= workdir.WARN_BYTES:
        progress(f"  warning: that is a lot to upload with every job ({hint()})")
    return render_job(spec, shipped, resume=options.resume)


def check_environment(spec: ExperimentSpec, shipped: workdir.WorkingDir | None = None,
                      progress: Progress = lambda _: None) -> None:
    """SpecError for what only submission can tell: a `from_env` variable this environment
    does not set, a local requirement inside the working_dir that the upload leaves out, a
    tracking URI that cannot work (`jobs.tracking`). `shipped`: what `ship(spec)` found (found
    here if not given)."""
    shipped = shipped if shipped is not None else ship(spec)
    from ..language.environment import IN_WORKING_DIR, section, unset

    assert spec.source is not None
    problems = unset(spec.source, spec.environment, os.environ)
    key = spec.environment.installer or "pip"
    listed = isinstance(section(spec.document).get(key), list)   # else a requirements file
    for index, text in enumerate(spec.environment.packages):
        relative = text[len(IN_WORKING_DIR):].strip("/")
        if text.startswith(IN_WORKING_DIR) and not shipped.under(relative).files:
            problems.append(spec.source.problem(
                ("runtime_env", key, index) if listed else ("runtime_env", key),
                f"{relative} is left out of the working_dir's upload, so the job cannot install it",
                "an exclude, .gitignore or .rayignore pattern matches it (`wheels/` and `dist/` "
                "are in many .gitignore files)"))
    if problems:
        raise SpecError(problems)
    if spec.document.get("tracking"):
        from ..render.experiment import resolve_config
        from . import tracking

        tracking.check(spec, resolve_config(spec), local=spec.cluster is None, progress=progress)


def submit(plan: JobPlan[JobConfig], spec: ExperimentSpec, jobs: JobsClient, state: State,
           cluster: str | None, options: RunOptions) -> Submission:
    from .secrets import shipped

    job_id = plan.submission_id + (f"-{int(time.time() * 1000):x}" if options.force else "")
    with shipped(plan.runtime_env, plan.secrets, os.environ) as runtime_env:
        created = jobs.submit(entrypoint=plan.entrypoint, runtime_env=runtime_env,
                              submission_id=job_id, metadata={"experiment": spec.name})
    if created:
        state.store.record_job(job_id, cluster=cluster, experiment=str(spec.path.resolve()),
                               name=plan.config["run_config"].get("name") or spec.name)
    return Submission(job_id, created, plan, cluster)


def epoch_printer(quiet: bool, progress: Progress) -> Callable[[str], None]:
    """A log-line handler: an epoch's metrics on one line; other lines unless `quiet`."""
    from .progress import epoch_text

    seen: dict[str, int] = {}   # trial ("" outside Tune) -> epochs so far

    def on_line(line: str) -> None:
        row = contract.parse_epoch(line)
        if row is not None:
            trial = str(row.get("trial") or "")
            seen[trial] = seen.get(trial, 0) + 1
            progress(epoch_text(row, count=seen[trial]))
        elif not quiet and not contract.is_result_line(line):
            progress(line)
    return on_line


def results(jobs: JobsClient, submission: Submission, status: str, started: float,
            state: State, progress: Progress) -> dict[str, Any]:
    """The finished job's summary, recorded for `orchestrate results` and `runs`; JobError if
    it failed (its end recorded too)."""
    wall_time = round(time.monotonic() - started, 1)
    try:
        summary = outcome(jobs, submission.job_id, status, submission.cluster, progress)
    except JobError as exc:
        state.store.update_job(submission.job_id, {
            "status": status if status != "SUCCEEDED" else "FAILED", "error": exc.message,
            "wall_time_s": wall_time, "ended_at": time.time()})
        raise
    summary["wall_time_s"] = wall_time
    run_name = submission.plan.config["run_config"].get("name")
    # the run, the latest of its name, and the job's own
    for key in {summary.get("name"), run_name, submission.job_id}:
        if key:
            state.store.record_run(key, summary, submission.job_id)
    state.store.update_job(submission.job_id, {
        "status": summary.get("status"), "run": summary.get("name"), "wall_time_s": wall_time,
        "ended_at": time.time()})
    return summary


def outcome(jobs: JobsClient, job_id: str, status: str, cluster: str | None,
            progress: Progress) -> dict[str, Any]:
    """A finished job's summary (its result line); JobError, with the log's last lines shown,
    when it failed."""
    log = jobs.logs(job_id)
    summary = contract.parse_result(log) or {}
    if status != "SUCCEEDED" or summary.get("status") != "SUCCEEDED":
        progress("\n".join(["", "last lines of the job's log:"] + log.rstrip().splitlines()[-TAIL:]))
        reason = summary.get("error") or f"the job ended {status}"
        hints = [f"the whole log: orchestrate logs {job_id}"] if cluster else []
        if reason.startswith("ModuleNotFoundError"):
            hints.insert(0, "a package the job needs goes under runtime_env.pip in the "
                            "experiment file")
        raise JobError(f"job {job_id} failed: {reason}", hint="; ".join(hints) or None)
    return summary


def latest_run(spec: ExperimentSpec, state: State) -> str | None:
    """The folder of the experiment's latest finished run that this machine recorded (what
    `orchestrate results NAME` shows), if any."""
    run_name = (spec.document.get("run_config") or {}).get("name") or spec.name
    summary = state.store.run(run_name)
    return str(summary["run_path"]) if summary and summary.get("run_path") else None


def find_results(key: str, state: State) -> dict[str, Any]:
    """A run's summary by run name, job id (what this machine recorded), or the run's folder
    (a path or URI, read where the run wrote it); JobError when there is none."""
    from ..workload import results as files

    summary = state.store.run(key)
    job = state.store.job(key)
    if summary is None and job and job.get("status") in ("FAILED", "STOPPED"):
        raise JobError(f"job {key} ended {job['status']}: {job.get('error') or 'no results'}",
                       hint="its log: orchestrate logs " + key)
    if summary is None and job:
        summary = state.store.run(job.get("run") or job.get("name") or "")
    if summary is None and ("/" in key or is_uri(key)):
        uri = key if is_uri(key) else os.path.abspath(key)
        data = files.read_bytes(files.join(uri, contract.RESULTS_FOLDER, "summary.json"))
        summary = json.loads(data) if data else None
    if summary is None:
        raise JobError(f"no results for {key!r}",
                       hint="give a run name from `orchestrate run`, a job id, or a run folder")
    return summary


def leave_running(job_id: str, cluster: str | None, state: State) -> str:
    """After Ctrl-C while following: keep the local Ray up for the job; say how to reach it."""
    if cluster is None:
        embedded.keep_running(state.secrets)
    return (f"\nstopped following; job {job_id} keeps running.\n"
            f"  follow it: orchestrate logs --follow {job_id}\n"
            f"  stop it:   orchestrate stop {job_id}"
            + ("" if cluster else "\n  then stop the local Ray: orchestrate stop "
               "--local-ray"))
