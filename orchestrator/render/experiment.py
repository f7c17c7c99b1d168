"""ExperimentSpec -> JobPlan: what `orchestrate run` submits to Ray's Job Submission API.

The resolved configuration (`contract.JobConfig`) is everything the job needs, as plain JSON;
the job's code (orchestrator.workload) reads it from `contract.CONFIG_ENV`. The submission id is
derived from the content (config + working_dir digest), so an unchanged experiment is not run
twice by accident.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from .. import cluster_settings, contract, trainers
from ..contract import (
    DatasetSection,
    JobConfig,
    PredictConfig,
    RunSection,
    ScalingSection,
    TrackingSection,
    TuneSection,
)
from ..errors import Problem
from ..language.environment import IN_WORKING_DIR, Environment
from ..language.experiment import ExperimentSpec, guess_format
from ..util.uris import is_uri
from ..util.workdir import WorkingDir, excludes_for, scan

Config = TypeVar("Config", JobConfig, PredictConfig)


@dataclass(frozen=True)
class JobPlan(Generic[Config]):
    """A job to submit: training (`JobPlan[JobConfig]`) or prediction (`render.predict`)."""
    entrypoint: str
    runtime_env: dict[str, Any]
    config: Config
    submission_id: str
    # The job's variables whose values come from the submitting environment (job's name ->
    # submitter's name); `run.secrets` ships the values apart from the runtime_env.
    secrets: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"submission_id": self.submission_id, "entrypoint": self.entrypoint,
                "runtime_env": self.runtime_env, "config": self.config}


def package_dir() -> str:
    return str(Path(__file__).resolve().parent.parent)


def dataset_path(path: str, base: Path, working_dir: Path) -> str:
    """A path the job can open: a URI as is; a local path inside working_dir relative to it
    (the job's cwd on every node), any other local path absolute."""
    if is_uri(path):
        return path
    absolute = (base / Path(path).expanduser()).resolve()
    try:
        return str(absolute.relative_to(working_dir))
    except ValueError:
        return str(absolute)


def resolve_config(spec: ExperimentSpec,
                   environ: Mapping[str, str] | None = None) -> JobConfig:
    """`environ`: where MLFLOW_TRACKING_URI is read when `tracking.mlflow` names no URI (this
    process's environment if not given). The run's storage_path is the experiment's, else its
    cluster file's `storage:`, else None (Ray's default, ~/ray_results on each node)."""
    data, base = spec.document, spec.path.resolve().parent
    run: RunSection = {}
    if data.get("run_config"):
        run.update(data["run_config"])  # the schema allows RunSection's keys only
    run.setdefault("name", spec.name)
    # the cluster's shared storage, as is: Ray Train keeps each run under <storage>/<run name>
    storage = run.get("storage_path") or \
        (cluster_settings.storage(spec.cluster.document) if spec.cluster is not None else None)
    if storage and not is_uri(storage):
        storage = str((base / Path(storage).expanduser()).resolve())
    run["storage_path"] = storage
    run.setdefault("checkpoint_config", None)
    run.setdefault("failure_config", None)
    scaling: ScalingSection = {"num_workers": 1, "use_gpu": False, "resources_per_worker": None}
    if data.get("scaling_config"):
        scaling.update(data["scaling_config"])
    datasets: dict[str, DatasetSection] = {
        name: _dataset(d, base, spec.working_dir) for name, d in (data.get("datasets") or {}).items()
    }
    tune: TuneSection | None = None
    if data.get("tune"):
        tune = {"param_space": data["tune"]["param_space"],
                "tune_config": data["tune"].get("tune_config") or {}}
    config: JobConfig = {
        "version": contract.CONFIG_VERSION,
        "workload": "train",
        "name": spec.name,
        "trainer": spec.trainer,
        "model": data.get("model"),
        "train_loop": data.get("train_loop"),
        "data_loader": data.get("data_loader", "ray_data"),
        "datasets": datasets,
        "label_column": data.get("label_column"),
        "feature_columns": data.get("feature_columns"),
        "preprocessors": data.get("preprocessors") or [],
        "train_loop_config": data.get("train_loop_config") or {},
        "scaling_config": scaling,
        "run_config": run,
        "params": data.get("params"),
        "num_boost_round": data.get("num_boost_round"),
        "tune": tune,
        "resume": False,
    }
    # what the trainer interprets (the built-in model's arguments, a default label column)
    config = cast(JobConfig, {**config, **trainers.get(spec.trainer).job_fields(data)})
    tracked = tracking(spec, os.environ if environ is None else environ)
    if tracked is not None:   # absent otherwise: an untracked job's id is as it was before
        config["tracking"] = tracked
    return config


def tracking(spec: ExperimentSpec, environ: Mapping[str, str]) -> TrackingSection | None:
    """`tracking.mlflow`, resolved: the URI (a folder relative to the experiment file made
    absolute; `""` when neither the file nor MLFLOW_TRACKING_URI gives one, which the check
    before submission refuses), the experiment's name, and what identifies the source."""
    section = (spec.document.get("tracking") or {}).get("mlflow")
    if section is None:
        return None
    from .. import __version__

    written = section.get("tracking_uri") or ""
    uri = _local_store(written, spec.path.resolve().parent) if written else \
        _local_store(environ.get("MLFLOW_TRACKING_URI", ""), Path.cwd())
    if urllib.parse.urlsplit(uri).password:   # it would travel in the job's config, which Ray shows
        from ..errors import Problem, SpecError

        field = ("tracking", "mlflow", "tracking_uri") if written else ("tracking", "mlflow")
        message = "the tracking URI carries a password" + ("" if written else
                                                           " (MLFLOW_TRACKING_URI)")
        hint = ("leave it out of the URI and set MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) where you run orchestrate")
        raise SpecError([spec.source.problem(field, message, hint) if spec.source else
                         Problem(str(spec.path), message, field=".".join(field), hint=hint)])
    return {"tracking_uri": uri,
            "experiment_name": section.get("experiment_name") or spec.name,
            "tags": {str(k): str(v) for k, v in (section.get("tags") or {}).items()},
            "log_artifacts": bool(section.get("log_artifacts", True)),
            "experiment_file": str(spec.path.resolve()),
            "experiment_sha256": spec.source.sha256 if spec.source else "",
            "orchestrate_version": __version__}


def _dataset(d: dict[str, Any], base: Path, working_dir: Path) -> DatasetSection:
    section: DatasetSection = {"format": d.get("format") or guess_format(d["path"]),
                               "path": dataset_path(d["path"], base, working_dir),
                               "written": d["path"], "cache": d.get("cache", "auto")}
    if d.get("read_options"):
        section["read_options"] = d["read_options"]
    return section


def identity(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config as its submission id and `plan` hash it: without the datasets' `written`
    (what names them in results, derived from the `path` and the file's place, which are in
    it already), so an upgrade that added it finds the same ids and no drift."""
    found = dict(config)
    datasets = found.get("datasets")
    if isinstance(datasets, Mapping):
        found["datasets"] = {name: {k: v for k, v in d.items() if k != "written"}
                             if isinstance(d, Mapping) else d for name, d in datasets.items()}
    return found


def submission_id(config: JobConfig, working_dir_digest: str,
                  environment: dict[str, Any] | None = None) -> str:
    """`environment`: `Environment.public()` (names of secrets, never their values)."""
    content = json.dumps(identity(config), sort_keys=True) + working_dir_digest
    if environment:
        content += json.dumps(environment, sort_keys=True)
    return f"orchestrate-{config['name']}-{hashlib.sha256(content.encode()).hexdigest()[:12]}"


def render_job(spec: ExperimentSpec, shipped: WorkingDir, *,
               resume: bool = False) -> JobPlan[JobConfig]:
    """`shipped`: what `ship(spec)` found in the working_dir; its digest is part of the id."""
    config = resolve_config(spec)
    config["resume"] = resume
    environment = spec.environment
    credentials = tracking_credentials(config)
    if credentials:
        environment = dataclasses.replace(environment, secrets={**environment.secrets, **credentials})
    return JobPlan(entrypoint=contract.ENTRYPOINT,
                   runtime_env=runtime_env(contract.encode(config), spec.working_dir, shipped,
                                           environment, _workers(config)),
                   config=config,
                   submission_id=submission_id(config, shipped.digest(), environment.public()),
                   secrets=dict(environment.secrets))


def _local_store(uri: str, base: Path) -> str:
    """A folder (a file store) or a SQLite file named relative to `base`, made absolute: the
    job runs elsewhere (Ray's copy of the working_dir). Servers and absolute paths as given."""
    if not uri or uri.startswith(("databricks", "file:/")):
        return uri
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str((base / uri[len("sqlite:///"):]).resolve())
    if is_uri(uri) or uri.startswith(("file:", "sqlite:")):
        return uri
    return str((base / Path(uri).expanduser()).resolve())


def tracking_credentials(config: JobConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The MLflow credentials set where `orchestrate run` runs, which a tracked job is given as
    secrets (never in its runtime_env, rendered files or logs)."""
    environ = os.environ if environ is None else environ
    if not config.get("tracking"):
        return {}
    return {name: name for name in contract.MLFLOW_CREDENTIALS if environ.get(name)}


# Ray Train's controller collects the workers' reports, and sees that training ended, once per
# health-check interval (Ray's default 2 s): each epoch's report waits for that poll, so a short
# run spends most of its epochs, and its last seconds, waiting. orchestrate polls as often as
# keeps the controller's calls at POLLS_PER_S a second in all (0.2 s for 2 workers, Ray's 2 s
# from 20 workers on); a missed poll is not a failure in Ray (a worker is declared dead after
# RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S, 10 minutes). A user's env_vars may set it.
TRAIN_POLL_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"
POLLS_PER_S = 10.0


def _workers(config: JobConfig) -> int:
    workers: object = config["scaling_config"].get("num_workers", 1)
    return workers if isinstance(workers, int) and workers > 0 else 1


def train_poll(workers: int) -> dict[str, str]:
    return {TRAIN_POLL_ENV: f"{min(2.0, max(0.2, workers / POLLS_PER_S)):g}"}


def runtime_env(encoded: str, working_dir: Path | None, shipped: WorkingDir | None,
                environment: Environment | None = None, workers: int = 1) -> dict[str, Any]:
    """The job's runtime_env: orchestrate's package, the configuration, and the working_dir with
    the excludes `shipped` was scanned with (none: the job ships no working_dir); the
    experiment's packages, plain variables and Ray's `config` (its secrets travel apart)."""
    environment = environment or Environment()
    env: dict[str, Any] = {}
    if working_dir is not None and shipped is not None:
        env.update(working_dir=str(working_dir), excludes=list(shipped.excludes))
    if environment.installer:
        env[environment.installer] = [_with_digest(text, shipped) for text in environment.packages]
    env.update(py_modules=[package_dir()],
               env_vars={"RAY_USAGE_STATS_ENABLED": "0",
                         # Ray's driver folds lines that look alike from several processes (Tune
                         # trials' epochs): never the contract's marks.
                         "RAY_DEDUP_LOGS_ALLOW_REGEX": contract.MARKS_PATTERN,
                         **train_poll(workers),
                         **environment.env_vars,
                         **secret_names(environment), contract.CONFIG_ENV: encoded},
               worker_process_setup_hook=contract.WORKER_SETUP)
    if environment.config:
        env["config"] = dict(environment.config)
    return env


def secret_names(environment: Environment) -> dict[str, str]:
    """The names (never the values) of the secrets the job must find (`contract.SECRET_NAMES_ENV`):
    a job whose secrets' package did not arrive fails instead of running without them."""
    if not environment.secrets:
        return {}
    return {contract.SECRET_NAMES_ENV: ",".join(sorted(environment.secrets))}


def _with_digest(requirement: str, shipped: WorkingDir | None) -> str:
    """A local requirement inside the working_dir with a digest of its files as shipped: Ray
    keys its pip cache by the lines' text, so a rebuilt wheel must change the line."""
    if shipped is None or not requirement.startswith(IN_WORKING_DIR):
        return requirement
    files = shipped.under(requirement[len(IN_WORKING_DIR):])
    return f"{requirement} # sha256:{files.digest()[:16]}"


def _credential_files(root: Path) -> tuple[str, ...]:
    """The kubeconfig files (KUBECONFIG's, ~/.kube/config) that lie in the working_dir, as
    anchored patterns: a project that keeps its kind or CI kubeconfig beside its code must not
    ship its client certificates with every job, nor into a RayJob's package store."""
    found = []
    for name in [*os.environ.get("KUBECONFIG", "").split(os.pathsep), "~/.kube/config"]:
        if not name:
            continue
        try:
            relative = Path(os.path.expanduser(name)).resolve().relative_to(root.resolve())
        except ValueError:
            continue
        found.append(f"/{relative.as_posix()}")
    return tuple(dict.fromkeys(found))


def ship(spec: ExperimentSpec) -> WorkingDir:
    """The files of the working_dir the job will carry: all but orchestrate's default excludes,
    the experiment's `runtime_env.excludes`, the run's own storage_path, a RayJob's file://
    package store and ORCHESTRATE_HOME (tokens, what this machine ran) when they lie inside,
    and what .gitignore / .rayignore files leave out (as Ray does). The one place this layer
    reads files; an input of `render_job`."""
    import os

    from ..state.folder import home

    storage = resolve_config(spec)["run_config"].get("storage_path")
    extra = list((spec.document.get("runtime_env") or {}).get("excludes") or [])
    inside = [storage] if storage and not is_uri(storage) else []
    store = str((spec.document.get("own_cluster") or {}).get("package_store") or "")
    if store.startswith("file://"):   # a RayJob's package store: never inside its own zip
        inside.append(urllib.parse.urlparse(store).path)
    store_folder, store_file = _tracking_store(spec)
    if store_folder:
        inside.append(store_folder)
    if store_file:   # SQLite's journal, -wal and -shm files beside it too
        extra.extend(f"{pattern}*" for pattern in _anchored(spec.working_dir, store_file))
    excludes = excludes_for(spec.working_dir, extra, [*inside, str(home())]) + \
        _credential_files(spec.working_dir)
    return scan(spec.working_dir, excludes,
                include_gitignore=os.environ.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "0") != "1",
                problem=lambda message, hint: _working_dir_problem(spec, message, hint))


def _tracking_store(spec: ExperimentSpec) -> tuple[str | None, str | None]:
    """(the folder, the file) of a local MLflow store the job writes to: where runs are
    recorded, never code to ship (shipped, it grew with each run and made an unchanged
    experiment a new job)."""
    from ..errors import SpecError

    try:
        tracked = tracking(spec, os.environ)
    except SpecError:   # a URI refused (a password in it): render_job says so where it runs
        return None, None
    uri = tracked["tracking_uri"] if tracked else ""
    if uri.startswith("sqlite:////"):
        return None, urllib.parse.unquote(uri[len("sqlite:///"):].split("?")[0])
    if uri.startswith("file:"):
        path = urllib.parse.unquote(urllib.parse.urlparse(uri).path)
        uri = str((spec.path.resolve().parent / path).resolve()) if path else ""
    return (uri, None) if uri.startswith("/") else (None, None)


def _anchored(root: Path, file: str) -> list[str]:
    """`file` as an exclude anchored at `root`, when it lies inside it."""
    try:
        return ["/" + Path(file).resolve().relative_to(root.resolve()).as_posix()]
    except ValueError:
        return []


def _working_dir_problem(spec: ExperimentSpec, message: str, hint: str) -> Problem:
    """A refusal of what the working_dir would ship, at the experiment's `working_dir` line."""
    if spec.source is not None:
        return spec.source.problem(("working_dir",), message, hint)
    return Problem(str(spec.path), message, field="working_dir", hint=hint)
