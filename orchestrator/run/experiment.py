"""Running an experiment: where its job goes, submitting it once, following it, its results.

    ran = run(spec, options, state, progress, display)   # the `run` use case, in this order:
    plan = prepare(spec, options, progress)              # rendered before Ray is touched
    with target(spec, state, keep=detach, progress=...) as (jobs, cluster): ...
    submission = submit(plan, spec, jobs, state, cluster, options)
    status = jobs.follow(job_id, display(...).on_line)
    summary = results(jobs, submission, status, ...)     # JobError when the job failed

Without `cluster:` the job goes to the embedded Ray (reused if one is up, else started; it
stays up until idle for ORCHESTRATE_EMBEDDED_RAY_IDLE, `reach.idle`). The submission id comes
from the experiment's content: an unchanged experiment finds the job it already started
instead of starting it twice (`force`: run again).
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .. import contract
from ..clients.jobs import JobsClient
from ..contract import JobConfig
from ..errors import JobError, Problem, SpecError
from ..language.experiment import ExperimentSpec
from ..reach import embedded
from ..reach.target import open_target, recorded_cluster
from ..render.experiment import JobPlan, render_job, resolve_config, ship
from ..state import ClusterRecord, State
from ..util import workdir
from ..util.progress import Progress
from ..util.text import hide, size_text
from ..util.uris import is_uri

if TYPE_CHECKING:
    from . import needs

TAIL = 25  # log lines shown when a job fails
CAPACITY_WAIT = 30.0   # seconds to wait for a Ray to say what resources it has


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
    cluster: str | None           # the cluster's name; None: the embedded Ray
    admission: needs.Admission | None = None   # its place in Ray's queue (None: not queued)


@dataclass(frozen=True)
class Ran:
    """What a `run` or `predict` use case ended with."""
    job_id: str
    created: bool                 # False: the same job existed already; nothing was started
    cluster: str | None           # None: the embedded Ray
    summary: dict[str, Any] | None = None   # None: detached, or interrupted while following
    interrupted: bool = False     # Ctrl-C while following: the job keeps running


class Follower(Protocol):
    """Where a followed job's log lines go (`run.progress.Display`)."""
    log_path: Path

    def on_line(self, line: str) -> None: ...

    def note(self, text: str) -> None: ...

    def close(self) -> None: ...


# (the job's config, its id, secret values to hide) -> where its log lines go
FollowerFactory = Callable[[JobConfig, str, dict[str, str]], Follower]
# after a new job was submitted (e.g. its entry in a project's state): the submission, and the
# working_dir as shipped (walked once per command)
OnSubmitted = Callable[[Submission, workdir.WorkingDir], None]


@contextlib.contextmanager
def target(spec: ExperimentSpec, state: State, *, keep: bool,
           progress: Progress) -> Iterator[tuple[JobsClient, str | None]]:
    """Jobs on the experiment's cluster, or on the embedded Ray (kept up if `keep`)."""
    record = None
    if spec.cluster is not None:
        record = recorded_cluster(state, name=spec.cluster.name, file=spec.cluster.path)
    size = None
    if record is None:   # the embedded Ray: if it is started now, sized for the run
        from . import needs

        size = needs.embedded_cpus(needs.of(resolve_config(spec)))
    with jobs_target(record, state, keep=keep, progress=progress, num_cpus=size,
                     profiling=spec.profiling) as found:
        yield found


@contextlib.contextmanager
def jobs_target(record: ClusterRecord | None, state: State, *, keep: bool, progress: Progress,
                num_cpus: int | None = None,
                profiling: bool = False) -> Iterator[tuple[JobsClient, str | None]]:
    """Jobs on `record`'s cluster, or on the embedded Ray (started with `num_cpus`, and
    profiling on if `profiling`, if it is not up; kept up after if `keep`); with the cluster's
    name (None: the embedded Ray)."""
    with open_target(state, record, start=True, keep=keep, num_cpus=num_cpus,
                     profiling=profiling, progress=progress) as endpoint:
        yield JobsClient(endpoint), record.name if record is not None else None


def run(spec: ExperimentSpec, options: RunOptions, state: State, progress: Progress,
        follower: FollowerFactory, on_submitted: OnSubmitted | None = None) -> Ran:
    """`orchestrate run`: prepare, submit once, and unless detached follow the job to its
    results (JobError when it failed; secret values hidden from what is said)."""
    started = time.monotonic()
    shipped = ship(spec)
    plan = _prepare(spec, shipped, options, progress)
    if spec.own_cluster is not None:   # a RayJob on a cluster of its own
        from . import rayjob

        ended = rayjob.run(spec, plan, shipped, state, progress, detach=options.detach,
                           force=options.force)
        return Ran(ended.job_id, ended.created, None, interrupted=ended.interrupted)
    # The job's log is shown as it comes: a secret it prints (a user's exception, say) is not.
    secrets = {name: os.environ[source] for name, source in plan.secrets.items()}

    def say(text: str) -> None:
        progress(hide(text, secrets))

    with target(spec, state, keep=options.detach, progress=progress) as (jobs, cluster):
        submission = submit(plan, spec, jobs, state, cluster, options, progress)
        submitted = time.monotonic() - started
        job_id = submission.job_id
        if submission.created:
            progress(f"submitted job {job_id} to {jobs.endpoint.label}")
            if submission.admission is not None:
                queued(jobs, job_id, submission.admission, progress)
            if on_submitted is not None:
                on_submitted(submission, shipped)
        else:
            progress(f"job {job_id} already exists ({jobs.status(job_id)}): this experiment is "
                     f"unchanged since it was submitted; not starting a duplicate (--force runs "
                     f"it again)")
        if options.detach:
            progress(f"follow it: orchestrate logs --follow {job_id}\n"
                     f"stop it:   orchestrate stop {job_id}")
            return Ran(job_id, submission.created, submission.cluster)
        display = follower(plan.config, job_id, secrets)
        try:
            status = jobs.follow(job_id, display.on_line, lambda quiet_for: stalled(
                jobs, job_id, submission.admission, quiet_for, display.note))
        except KeyboardInterrupt:
            display.close()
            progress(leave_running(job_id, submission.cluster, state))
            return Ran(job_id, submission.created, submission.cluster, interrupted=True)
        finally:
            display.close()   # the status line cleared, the log file closed (also on an error)
        try:
            summary = results(jobs, submission, status, started, state, say,
                              submitted=submitted)
        except JobError as exc:
            hint = "; ".join(h for h in (exc.hint, f"the log as followed here: {display.log_path}") if h)
            raise JobError(hide(exc.message, secrets), hint=hint) from None
    return Ran(job_id, submission.created, submission.cluster, summary)


def prepare(spec: ExperimentSpec, options: RunOptions, progress: Progress) -> JobPlan[JobConfig]:
    """The job to submit, rendered before any Ray is started; says how much of the working_dir
    it ships, warns when that is more than code usually is, refuses what Ray would refuse."""
    return _prepare(spec, ship(spec), options, progress)


def _prepare(spec: ExperimentSpec, shipped: workdir.WorkingDir, options: RunOptions,
             progress: Progress) -> JobPlan[JobConfig]:
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
    tracking URI that cannot work (`run.tracking`). `shipped`: what `ship(spec)` found (found
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
        from . import tracking

        tracking.check(spec, resolve_config(spec), embedded=spec.cluster is None, progress=progress)


def submit(plan: JobPlan[JobConfig], spec: ExperimentSpec, jobs: JobsClient, state: State,
           cluster: str | None, options: RunOptions,
           progress: Progress = lambda _: None) -> Submission:
    """Submit the job once (an unchanged experiment finds its job), in Ray's queue for the
    resources it needs (`run.needs`): SpecError, before anything starts, when the Ray can
    never hold it."""
    from .secrets import shipped

    job_id = plan.submission_id + (f"-{int(time.time() * 1000):x}" if options.force else "")
    admission = admit(spec, plan.config, jobs, cluster, state, progress)
    runtime_env = plan.runtime_env
    metadata = {"experiment": spec.name}
    if admission is not None:
        runtime_env = {**runtime_env, "env_vars": {**runtime_env.get("env_vars", {}),
                                                   **admission.env_vars}}
        metadata.update(admission.metadata)
    with shipped(runtime_env, plan.secrets, os.environ) as shipped_env:
        created = jobs.submit(
            entrypoint=plan.entrypoint, runtime_env=shipped_env, submission_id=job_id,
            metadata=metadata,
            entrypoint_resources=admission.entrypoint_resources if admission else None)
    if created:
        state.store.record_job(job_id, cluster=cluster, experiment=str(spec.path.resolve()),
                               name=plan.config["run_config"].get("name") or spec.name)
        fields: dict[str, Any] = {"needs": admission.asked} if admission is not None else {}
        storage = plan.config["run_config"].get("storage_path")
        if storage:   # where the run's folder will be, for `runs` before it has ended
            fields["storage_path"] = storage
        if fields:
            state.store.update_job(job_id, fields)
    return Submission(job_id, created, plan, cluster, admission)


def admit(spec: ExperimentSpec, config: JobConfig, jobs: JobsClient, cluster: str | None,
          state: State, progress: Progress) -> needs.Admission | None:
    """The run's place in its Ray's queue (`run.needs`), sized by the alive nodes of Ray's
    node table; SpecError naming the scaling section when the Ray can never hold it: on-prem,
    once every listed host is alive (a cluster that may grow is left to Ray Train's own check
    against its autoscaler's limits; a host not joined yet may still bring what is missing);
    None (not queued, said) when the Ray does not say what it has."""
    from ..util.waiting import poll
    from . import needs

    label = f"cluster {cluster}" if cluster else embedded.LABEL
    record = recorded_cluster(state, name=cluster) if cluster is not None else None

    def known() -> needs.Capacity | None:   # a Ray just started answers after a few seconds
        nodes = jobs.nodes()
        return needs.capacity_of(nodes, label) if nodes else None

    capacity = poll(known, timeout=CAPACITY_WAIT, interval=0.5)
    if capacity is None:
        progress(f"note: {label} did not say what resources it has; this run is not queued "
                 f"behind others")
        return None
    asked = needs.of(config)
    admission = needs.admit(asked, capacity)
    if not admission.too_big:
        return admission
    missing = _not_joined(record, capacity, state)
    if missing is None:
        return admission
    if missing:
        progress(f"note: {needs.refusal(admission, capacity)}; {', '.join(missing)} "
                 f"{'has' if len(missing) == 1 else 'have'} not joined: the run waits for "
                 f"{'it' if len(missing) == 1 else 'them'}")
        return admission
    raise SpecError([_scaling_problem(spec, needs.refusal(admission, capacity),
                                      _too_big_hint(asked, admission, cluster))])


def _not_joined(record: ClusterRecord | None, capacity: needs.Capacity,
                state: State) -> list[str] | None:
    """The hosts of an on-prem cluster that are not among `capacity`'s alive nodes ([]: all
    of them are; the embedded Ray is one machine); None where an autoscaler may add nodes."""
    if record is None:
        return []
    from .. import providers

    provider = providers.get(record.provider)
    if not provider.FIXED_HOSTS:
        return None
    config = state.store.read_rendered(record.name) or {}
    return provider.not_joined(config, capacity.node_ips)


def _too_big_hint(asked: needs.Needs, admission: needs.Admission, cluster: str | None) -> str:
    from . import needs

    lower = "lower scaling_config.num_workers or resources_per_worker"
    if cluster is not None:
        return f"{lower}, or add hosts to the cluster"
    if admission.too_big != ["CPU"]:
        return f"{lower}, or run it on a cluster that has them (`cluster:` in the experiment)"
    size = needs.embedded_cpus(asked)
    if size >= asked.one.get("CPU", 0):
        return (f"the embedded Ray is up with fewer CPUs: stop it (`orchestrate stop "
                f"--embedded`) and the next run starts one with {size}")
    return (f"{lower} (the embedded Ray has at most {size} CPUs on this machine), or run it on "
            f"a cluster (`cluster:` in the experiment)")


def _scaling_problem(spec: ExperimentSpec, message: str, hint: str) -> Problem:
    section = spec.document.get("scaling_config")
    path: tuple[str, ...] = ("scaling_config", "num_workers") if isinstance(section, dict) \
        and "num_workers" in section else ("scaling_config",) if section else ()
    if spec.source is not None:
        return spec.source.problem(path, message, hint)
    return Problem(str(spec.path), message, field=".".join(path), hint=hint)


def queued(jobs: JobsClient, job_id: str, admission: needs.Admission,
           progress: Progress) -> None:
    """Say so when the job just submitted waits in the queue: what it waits for, and how many
    runs hold the Ray or wait ahead of it."""
    from . import needs

    try:
        if jobs.status(job_id) != "PENDING":
            return
        listed = jobs.list()
    except JobError:
        return
    mine = next((j for j in listed if j.submission_id == job_id), None)
    others = [j for j in listed if j.submission_id != job_id
              and needs.SHARE_KEY in (j.metadata or {})]
    running = [j for j in others if str(getattr(j.status, "value", j.status)) == "RUNNING"]
    start = getattr(mine, "start_time", None) or 0
    ahead = [j for j in others if str(getattr(j.status, "value", j.status)) == "PENDING"
             and (j.start_time or 0) < start]
    # runs submitted before it are served first: they hold the Ray or soon will
    held = sum(float(j.metadata[needs.SHARE_KEY]) for j in running + ahead)
    if held + admission.share <= needs.HEAD_SHARE + 1e-9:
        return   # it fits: PENDING only while Ray sets up its environment
    progress(f"queued: the run waits for {admission.asked}; {len(running)} run(s) hold "
             f"{jobs.endpoint.label}'s resources now, {len(ahead)} wait ahead of it")


def stalled(jobs: JobsClient, job_id: str, admission: needs.Admission | None,
            quiet_for: float, say: Progress) -> None:
    """A followed run with no output for `quiet_for` seconds: say whether it still waits in
    the queue, or what Ray has been asked for and cannot place (resources held elsewhere)."""
    from . import needs
    from .progress import clock

    try:
        status = jobs.status(job_id)
    except JobError:
        return
    found = jobs.cluster_status()
    nodes = jobs.nodes()
    used = needs.in_use(found, needs.capacity_of(nodes, jobs.endpoint.label) if nodes else None)
    if status == "PENDING":
        asked = f": it waits for {admission.asked}" if admission else ""
        say(f"still queued after {clock(quiet_for)}{asked}" + (f"; {used}" if used else ""))
        return
    waits = needs.waiting(found)
    if status == "RUNNING" and waits:
        say(f"no output for {clock(quiet_for)}; Ray cannot place what was asked of it yet: "
            f"{waits}" + (f" ({used})" if used else ""))


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
            state: State, progress: Progress, submitted: float | None = None) -> dict[str, Any]:
    """The finished job's summary, recorded for `orchestrate results` and `runs`; JobError if
    it failed (its end recorded too). `started`: when this command began (monotonic);
    `submitted`: seconds from then until the job was accepted (for `phases`)."""
    wall_time = round(time.monotonic() - started, 1)
    seen: dict[str, Any] = {}
    try:
        summary = outcome(jobs, submission.job_id, status, submission.cluster, progress, seen)
    except JobError as exc:
        state.store.update_job(submission.job_id, {
            "status": status if status != "SUCCEEDED" else "FAILED", "error": exc.message,
            "wall_time_s": wall_time, "ended_at": time.time()})
        raise
    summary["wall_time_s"] = wall_time
    if submitted is not None and submission.created:
        from . import phases

        summary["phases"] = phases.breakdown(seen.get("timing"), seen["log"],
                                             _job_start(jobs, submission.job_id), submitted,
                                             time.monotonic() - started)
    run_name = submission.plan.config["run_config"].get("name")
    # the run, the latest of its name, and the job's own
    for key in {summary.get("name"), run_name, submission.job_id}:
        if key:
            state.store.record_run(key, summary, submission.job_id)
    state.store.update_job(submission.job_id, {
        "status": summary.get("status"), "run": summary.get("name"), "wall_time_s": wall_time,
        "ended_at": time.time()})
    return summary


def _job_start(jobs: JobsClient, job_id: str) -> float | None:
    """When Ray's job table says the job started (seconds), None if it cannot say."""
    try:
        start = getattr(jobs.info(job_id), "start_time", None)
    except JobError:
        return None
    return start / 1000 if isinstance(start, (int, float)) else None


def outcome(jobs: JobsClient, job_id: str, status: str, cluster: str | None,
            progress: Progress, seen: dict[str, Any] | None = None) -> dict[str, Any]:
    """A finished job's summary (its result line); JobError, with the log's last lines shown,
    when it failed. `seen` gets the log as read and the driver's `timing` marks (taken out of
    the summary: `phases` makes sense of them)."""
    log = jobs.logs(job_id)
    summary = contract.parse_result(log) or {}
    timing = summary.pop("timing", None)
    if seen is not None:
        seen.update(log=log, timing=timing)
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
    from ..workload import storage as files

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
    """After Ctrl-C while following: keep the embedded Ray up for the job; say how to reach it."""
    if cluster is None:
        embedded.keep_running(state.secrets)
    return (f"\nstopped following; job {job_id} keeps running.\n"
            f"  follow it: orchestrate logs --follow {job_id}\n"
            f"  stop it:   orchestrate stop {job_id}"
            + ("" if cluster else "\n  then stop the embedded Ray: orchestrate stop "
               "--embedded"))
