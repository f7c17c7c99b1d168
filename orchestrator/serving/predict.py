"""`orchestrate predict`: batch prediction with a run's checkpoint, as a Ray job.

    ran = run(options, state, progress)            # the `predict` use case, in this order:
    request, where = resolve(options, state)       # which run, which data, which Ray
    plan = render_predict(request, ...)            # before any Ray is touched
    with jobs_target(where.cluster, ...) as (jobs, cluster):
        job_id, created = submit(plan, jobs, ...)  # an unchanged request finds its job
        status = jobs.follow(job_id, ...)
        summary = outcome(jobs, job_id, status, ...)

The source is an experiment file (its latest run on this machine, as `orchestrate results`
knows it), a run folder, or a checkpoint folder; the job picks the checkpoint on the cluster
(`workload.card.locate`), where the run's files are.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..clients.jobs import JobsClient
from ..contract import PREDICTIONS_FOLDER, DatasetSection
from ..errors import JobError, OrchestrateError, Problem, SpecError
from ..language.experiment import ExperimentSpec, guess_format, load_experiment
from ..reach.target import recorded_cluster
from ..render.experiment import dataset_path, ship
from ..render.predict import PredictPlan, PredictRequest, Settings, render_predict
from ..run.experiment import Ran, jobs_target, latest_run, leave_running, outcome
from ..state import ClusterRecord, State
from ..util.progress import Progress
from ..util.uris import CREDENTIALS_HINT, CREDENTIALS_MESSAGE, has_credentials, is_uri
from ..util.workdir import WorkingDir

EXPERIMENT_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class PredictOptions:
    source: str                        # EXPERIMENT.yaml, a run folder or a checkpoint folder
    data: str                          # a path (relative to the current folder) or a URI
    output: str
    data_format: str | None = None     # None: from the data's suffix, as for datasets
    cluster: str | None = None         # for a run or checkpoint folder; an experiment has its own
    force: bool = False
    settings: Settings = Settings()
    detach: bool = False               # return once the job is submitted


@dataclass(frozen=True)
class Where:
    cluster: ClusterRecord | None      # None: the embedded Ray
    spec: ExperimentSpec | None        # the experiment the source names, if it names one
    working_dir: Path | None           # shipped with the job when the data lies inside it
    shipped: WorkingDir | None


def _absolute(path: str) -> str:
    return path if is_uri(path) else str(Path(path).expanduser().resolve())


def _problem(message: str, field: str, hint: str | None = None) -> SpecError:
    return SpecError([Problem("orchestrate predict", message, field=field, hint=hint)])


def resolve(options: PredictOptions, state: State) -> tuple[PredictRequest, Where]:
    """The request and where it runs; SpecError/JobError for a source that is not there."""
    secret = [field for value, field in ((options.source, "SOURCE"), (options.data, "--data"),
                                         (options.output, "--output")) if has_credentials(value)]
    if secret:
        raise SpecError([Problem("orchestrate predict", CREDENTIALS_MESSAGE, field=field,
                                 hint=CREDENTIALS_HINT) for field in secret])
    spec: ExperimentSpec | None = None
    record = None
    if options.source.endswith(EXPERIMENT_SUFFIXES) and not is_uri(options.source):
        spec = load_experiment(options.source)
        source, name = _latest_run(spec, state), spec.name
        if spec.cluster is not None:
            record = recorded_cluster(state, name=spec.cluster.name, file=spec.cluster.path)
    else:
        source = _absolute(options.source)
        parts = source.rstrip("/").rsplit("/", 2)
        name = parts[-2] if parts[-1].startswith("checkpoint_") and len(parts) > 1 else parts[-1]
        if options.cluster:
            record = recorded_cluster(state, name=options.cluster, asked=options.cluster)
    if record is None:  # the embedded Ray reads this machine's files: say now what is missing
        for value, field in ((source, "SOURCE"), (options.data, "--data")):
            if not is_uri(value) and not Path(_absolute(value)).exists():
                raise _problem(f"{value} does not exist", field)
    data, working_dir, shipped = _data(options, spec)
    output = _absolute(options.output)
    request = PredictRequest(name=_job_name(name), source=source, data=data, output=output,
                             settings=options.settings)
    return request, Where(record, spec, working_dir, shipped)


def run(options: PredictOptions, state: State, progress: Progress) -> Ran:
    """`orchestrate predict`: resolve, render, submit once, and unless detached follow the job
    to its summary (JobError when it failed)."""
    request, where = resolve(options, state)
    job = plan(request, where)
    started = time.monotonic()
    with jobs_target(where.cluster, state, keep=options.detach, progress=progress) \
            as (jobs, cluster):
        job_id, created = submit(job, jobs, state, cluster, options.force)
        progress(f"submitted job {job_id} to {jobs.endpoint.label}" if created else
                 f"job {job_id} already exists ({jobs.status(job_id)}): the same prediction was "
                 f"submitted before; not starting a duplicate (--force runs it again)")
        if options.detach:
            progress(f"follow it: orchestrate logs --follow {job_id}")
            return Ran(job_id, created, cluster)

        def lines(line: str) -> None:
            """The job's own progress lines; Ray Data's are in `orchestrate logs`."""
            if "orchestrate:" in line:
                progress(line[line.index("orchestrate:"):])

        try:
            status = jobs.follow(job_id, lines)
        except KeyboardInterrupt:
            progress(leave_running(job_id, cluster, state))
            return Ran(job_id, created, cluster, interrupted=True)
        summary = outcome(jobs, job_id, status, cluster, progress)
    summary["wall_time_s"] = round(time.monotonic() - started, 1)
    return Ran(job_id, created, cluster, summary)


def _job_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-.")
    return cleaned[:60] or "run"


def _latest_run(spec: ExperimentSpec, state: State) -> str:
    run = latest_run(spec, state)
    if run is None:
        raise JobError(f"no finished run of {spec.path} is recorded on this machine",
                       hint=f"run it first (orchestrate run {spec.path}), or give the run's "
                            f"folder or a checkpoint instead of the experiment file")
    return run


def _data(options: PredictOptions, spec: ExperimentSpec | None) \
        -> tuple[DatasetSection, Path | None, WorkingDir | None]:
    """The data section as the job reads it, read_options as the experiment's datasets of the
    same format have them; the experiment's working_dir when the data lies inside it."""
    fmt = options.data_format or ("images" if image_folder(options.data)
                                  else guess_format(options.data))
    section: DatasetSection = {"format": fmt, "path": _absolute(options.data)}
    working_dir = shipped = None
    if spec is not None:
        same = [d for d in (spec.document.get("datasets") or {}).values()
                if (d.get("format") or guess_format(d["path"])) == fmt and d.get("read_options")]
        if same:
            section["read_options"] = same[0]["read_options"]
        inside = dataset_path(section["path"], Path.cwd(), spec.working_dir)
        if not is_uri(inside) and not Path(inside).is_absolute():
            section["path"], working_dir, shipped = inside, spec.working_dir, ship(spec)
    return section, working_dir, shipped


def image_folder(path: str, look: int = 1000) -> bool:
    """A local folder whose first data file (in walk order, within `look` files) is an image:
    predicted as `format: images`."""
    from ..workload.images import EXTENSIONS

    if is_uri(path) or not Path(path).is_dir():
        return False
    for seen, file in enumerate(p for p in Path(path).rglob("*") if p.is_file()):
        suffix = file.suffix.lower().lstrip(".")
        if suffix in EXTENSIONS:
            return True
        if suffix in ("parquet", "pq", "csv", "json", "jsonl", "npy") or seen >= look:
            return False
    return False


def plan(request: PredictRequest, where: Where) -> PredictPlan:
    return render_predict(request, where.working_dir, where.shipped)


def submit(plan: PredictPlan, jobs: JobsClient, state: State, cluster: str | None,
           force: bool) -> tuple[str, bool]:
    """(job id, created). A request like one already submitted finds that job; a new one into
    an output folder that already holds predictions is refused before anything starts."""
    job_id = plan.submission_id + (f"-{int(time.time() * 1000):x}" if force else "")
    output = plan.config["output"]["path"]
    if not is_uri(output) and cluster is None and (Path(output) / PREDICTIONS_FOLDER).exists() \
            and not _exists(jobs, job_id):
        raise _problem(f"{output} already holds predictions", "--output",
                       "give another --output folder, or remove this one")
    created = jobs.submit(entrypoint=plan.entrypoint, runtime_env=plan.runtime_env,
                          submission_id=job_id, metadata={"predict": plan.config["name"]})
    if created:
        state.store.record_job(job_id, cluster=cluster, experiment=plan.config["source"]["path"],
                               name=f"predict-{plan.config['name']}")
    return job_id, created


def _exists(jobs: JobsClient, job_id: str) -> bool:
    try:
        jobs.status(job_id)
    except OrchestrateError:
        return False
    return True
