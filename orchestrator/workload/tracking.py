"""MLflow tracking of a training run (`tracking.mlflow` in the experiment), from the job.

    run = start(config, name, run_uri)              # the driver: the run, its parameters
    with following(run, run_uri):                   # each epoch, as the run's history grows
        trainer.fit()
    finish(run, summary, files)                     # the driver: final metrics, artifacts, status

A Tune sweep is one parent run (the driver's) and one child per trial (`parent=`), each started
by the trial that it tracks. Metrics are the rows Ray Train's controller receives from rank 0 and
appends to the run's history (`results.make_history_callback`), so no user code logs anything
twice. They are sent from the process that waits on `fit()` (the driver, or a Tune trial), which
has MLflow's client loaded already: the controller and the workers never import it (about a
second of CPU each). A user's own train loop reaches the same run with `mlflow_run()`. Ray's
`setup_mlflow` is not used for that: it starts a run of its own per call, so the loop's metrics
and orchestrate's would land in two runs.

The client is MLflow's (`mlflow-skinny` is enough); credentials are the ones MLflow reads from the
environment (`contract.MLFLOW_CREDENTIALS`, shipped as the job's secrets).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..contract import MLFLOW_RUN_FILE, RESULTS_FOLDER, JobConfig, TrackingSection
from ..util.text import flatten
from . import storage

MISSING = ("tracking.mlflow needs MLflow's client in the job's Python ({python}): pip install "
           "mlflow-skinny (with orchestrate: pip install 'orchestrate-ray[mlflow]'), or list "
           "mlflow-skinny under runtime_env.pip in the experiment file")


@dataclasses.dataclass(frozen=True)
class Run:
    """One MLflow run: enough to log to it from any process of the job (picklable)."""
    tracking_uri: str
    experiment_id: str
    run_id: str


_open: list[Run] = []         # runs this process started and has not finished
_active: list[Run] = []       # the run a user's train loop logs to (`mlflow_run`), if any


def client(tracking_uri: str) -> Any:
    """MLflow's client for `tracking_uri`; ImportError naming the pip install if absent."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise _missing() from None
    _allow_file_store(tracking_uri)
    return MlflowClient(tracking_uri=tracking_uri)


def _missing() -> ImportError:
    import sys

    return ImportError(MISSING.format(python=sys.executable))


def _allow_file_store(tracking_uri: str) -> None:
    """A folder as the store is what the experiment asked for: MLflow 3 keeps that backend in
    "maintenance mode" and refuses it unless told so (it suggests sqlite:/// instead)."""
    if is_file_store(tracking_uri):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")


def is_file_store(tracking_uri: str) -> bool:
    return tracking_uri.startswith(("file:", "/"))


def public_uri(uri: str) -> str:
    """The tracking URI without a user or password written into it."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def section(config: Mapping[str, Any]) -> TrackingSection | None:
    found = config.get("tracking")
    return found if isinstance(found, dict) and found.get("tracking_uri") else None  # type: ignore[return-value]


def params(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a run is compared by: the loop's settings, the model's, the scaling, the datasets'
    paths as the experiment file gives them (never the job's copy of the working_dir, whose
    folder changes with every run), XGBoost's parameters, and (when tracked) the experiment
    file's hash and orchestrate's version; as dotted keys (`train_loop_config.lr`)."""
    picked: dict[str, Any] = {"trainer": config.get("trainer")}
    for key in ("train_loop_config", "scaling_config", "params", "num_boost_round", "train_loop"):
        if config.get(key) not in (None, {}):
            picked[key] = config[key]
    model = config.get("model")
    if model:
        picked["model"] = {"name": model["name"], **(model.get("args") or {})}
    datasets = config.get("datasets") or {}
    if datasets:
        picked["datasets"] = {split: d.get("written") or d.get("path")   # older configs: path
                              for split, d in datasets.items()}
    tracked = section(config)
    if tracked:
        picked["orchestrate"] = {"experiment_sha256": tracked["experiment_sha256"],
                                 "version": tracked["orchestrate_version"]}
    return {k: v for k, v in flatten(picked).items() if v is not None}


def start(config: JobConfig, run_name: str, run_uri: str, *, parent: Run | None = None,
          extra_params: Mapping[str, Any] | None = None) -> Run | None:
    """The run `config` is tracked in (None: not tracked), created under its experiment with its
    parameters and tags; a resumed run (`resume: true`) continues the MLflow run it had."""
    tracked = section(config)
    if tracked is None:
        return None
    from mlflow.entities import Param

    mlflow = client(tracked["tracking_uri"])
    earlier = _recorded(run_uri) if config.get("resume") else None
    if earlier is not None and earlier.tracking_uri == tracked["tracking_uri"]:
        mlflow.update_run(earlier.run_id, status="RUNNING")
        return _opened(earlier)
    experiment_id = _experiment(mlflow, tracked["experiment_name"])
    tags = {**{str(k): str(v) for k, v in tracked["tags"].items()},
            "orchestrate.experiment": config["name"], "orchestrate.run": run_name,
            "orchestrate.storage": run_uri, "mlflow.source.name": tracked["experiment_file"]}
    if parent is not None:
        tags["mlflow.parentRunId"] = parent.run_id
    created = mlflow.create_run(experiment_id, run_name=run_name, tags=tags)
    run = Run(tracked["tracking_uri"], experiment_id, created.info.run_id)
    values = [Param(k, _text(v)) for k, v in {**params(config), **(extra_params or {})}.items()]
    for index in range(0, len(values), 100):  # MLflow's limit per batch
        mlflow.log_batch(run.run_id, params=values[index:index + 100])
    storage.write_bytes(storage.join(run_uri, RESULTS_FOLDER, MLFLOW_RUN_FILE),
                        json.dumps(dataclasses.asdict(run)).encode())
    return _opened(run)


def _opened(run: Run) -> Run:
    _open.append(run)
    return run


def _experiment(mlflow: Any, name: str) -> str:
    """The experiment's id, created if new (another run creating it at once is fine)."""
    found = mlflow.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    from mlflow.exceptions import MlflowException

    try:
        return str(mlflow.create_experiment(name))
    except MlflowException:
        found = mlflow.get_experiment_by_name(name)
        if found is None:
            raise
        return str(found.experiment_id)


def _recorded(run_uri: str) -> Run | None:
    data = storage.read_bytes(storage.join(run_uri, RESULTS_FOLDER, MLFLOW_RUN_FILE))
    try:
        return Run(**json.loads(data)) if data else None
    except (ValueError, TypeError):
        return None


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:6000]  # MLflow's limit for a parameter's value


def log_epoch(run: Run, row: Mapping[str, Any], step: int) -> None:
    """An epoch's numbers (rank 0's report) at `step`."""
    from mlflow.entities import Metric

    stamp = int(time.time() * 1000)
    metrics = [Metric(k, float(v), stamp, step) for k, v in row.items()
               if k != "epoch" and isinstance(v, (int, float)) and not isinstance(v, bool)]
    if metrics:
        client(run.tracking_uri).log_batch(run.run_id, metrics=metrics)


POLL_SECONDS = 1.0


@contextlib.contextmanager
def following(run: Run | None, run_uri: str) -> Iterator[None]:
    """While the body runs (a trainer's `fit()`), log each epoch the run's history gains to
    `run`, about once a second; when it ends, what the last epochs added. Nothing without a run."""
    if run is None:
        yield
        return
    follower = _Follower(run, run_uri)
    thread = threading.Thread(target=follower.follow, name="orchestrate-mlflow", daemon=True)
    thread.start()
    try:
        yield
    finally:
        follower.stop.set()
        thread.join()
        follower.poll()


class _Follower:
    def __init__(self, run: Run, run_uri: str) -> None:
        self.run, self.run_uri = run, run_uri
        self.logged = len(storage.read_history(run_uri))   # a resumed run logged its earlier epochs
        self.failed = False
        self.stop = threading.Event()

    def follow(self) -> None:
        while not self.stop.wait(POLL_SECONDS):
            self.poll()

    def poll(self) -> None:
        """Log the rows not logged yet; on MLflow's failure say so once and stop logging (the
        training goes on)."""
        if self.failed:
            return
        try:
            history = storage.read_history(self.run_uri)
        except ValueError:   # caught while the controller rewrites it: the next poll reads it
            return
        for index in range(self.logged, len(history)):
            row = history[index]
            try:
                log_epoch(self.run, row, int(row.get("epoch", index + 1)))
            except Exception as exc:  # noqa: BLE001 - a tracking server's trouble must not end a run
                first = str(exc).splitlines()[0] if str(exc) else ""
                print(f"orchestrate: warning: MLflow logging failed, the run goes on without it: "
                      f"{type(exc).__name__}: {first}", flush=True)
                self.failed = True
                return
            self.logged = index + 1


def finish(run: Run, summary: Mapping[str, Any], files: Mapping[str, bytes], *,
           log_artifacts: bool, step: int | None = None) -> None:
    """The final metrics (`summary["metrics"]`, at `step`), the files as artifacts, FINISHED."""
    mlflow = client(run.tracking_uri)
    if step is not None:
        log_epoch(run, summary.get("metrics") or {}, step)
    if log_artifacts and files:
        with tempfile.TemporaryDirectory() as folder:
            for name, data in files.items():
                with open(os.path.join(folder, name), "wb") as out:
                    out.write(data)
            mlflow.log_artifacts(run.run_id, folder)
    end(run, "FINISHED")


def end(run: Run, status: str) -> None:
    client(run.tracking_uri).set_terminated(run.run_id, status=status)
    if run in _open:
        _open.remove(run)


def fail_open_runs() -> None:
    """After a failure: the runs this process started end FAILED (best effort: the failure
    itself is what the job reports)."""
    for run in list(_open):
        try:
            end(run, "FAILED")
        except Exception:  # noqa: BLE001, S110 - the job's own error is the one to show
            pass


# --- a user's train loop: `mlflow_run()` ---

class _Noop:
    """What `mlflow_run()` gives where nothing is logged: every call does nothing."""

    def __getattr__(self, _name: str) -> Any:
        return self

    def __call__(self, *_args: Any, **_kwargs: Any) -> _Noop:
        return self


def mlflow_run() -> Any:
    """For a user's train loop: the `mlflow` module with this run active on rank 0, or an
    object on which every call does nothing (other ranks; an experiment without `tracking`).

        from orchestrator.workload.tracking import mlflow_run
        mlflow = mlflow_run()
        mlflow.log_metric("my_metric", value, step=epoch)
    """
    if not _active:
        return _Noop()
    run = _active[0]
    import ray.train

    if ray.train.get_context().get_world_rank() != 0:
        return _Noop()
    try:
        import mlflow
    except ImportError:
        raise _missing() from None
    _allow_file_store(run.tracking_uri)
    current = mlflow.active_run()
    if current is None or current.info.run_id != run.run_id:
        mlflow.set_tracking_uri(run.tracking_uri)
        mlflow.start_run(run_id=run.run_id)
    return mlflow


def run_of(config: Mapping[str, Any]) -> Run | None:
    """The run a trainer's config names (`train.with_run`), if any."""
    found = (config.get("tracking") or {}).get("run")
    return Run(**found) if isinstance(found, dict) else None


def with_run(loop: Callable[..., None], run: Run | None) -> Callable[..., None]:
    """A user's train loop that finds `run` through `mlflow_run()` (the loop itself unchanged;
    Ray Train calls it with a config only when it takes one, as before)."""
    if run is None:
        return loop
    # Ray Train reads the signature through __wrapped__ (the loop's own) to decide what to pass.
    return functools.update_wrapper(functools.partial(_call, loop, run), loop)


def _call(loop: Callable[..., None], run: Run, *args: Any, **kwargs: Any) -> None:
    _active[:] = [run]
    loop(*args, **kwargs)
