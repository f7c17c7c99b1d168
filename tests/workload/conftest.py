"""End-to-end fixtures: experiment folders with small synthetic data in the real formats, an
MLflow tracking server, and runs trained once for the whole session.

    data_dir       (session) the data: images/{train,valid} (CIFAR-10 layout parquet), a CSV
    experiment     experiment(name, **document) -> a file in the test's folder, beside data/
    mlflow_server  (session) `mlflow server` on loopback: (url, its folder)
    trained        (session) trained.mlp, trained.xgboost, trained.lightgbm (a Tune trial)
                   and trained.tensorflow: a run of each, trained on the shared Ray
                   the first time a test asks for it; predict, serve, tracking and comparison
                   tests read them instead of training their own
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from orchestrator.util.ports import free_port

from .synthetic import write_breast_cancer_csv, write_image_parquet

REPO = Path(__file__).resolve().parents[2]
MLFLOW = REPO / ".venv-mlflow" / "bin" / "mlflow"

TINY_VIT = {"name": "vit", "image_size": 32, "patch_size": 8, "num_layers": 1, "num_heads": 2,
            "hidden_dim": 32, "mlp_dim": 64, "num_classes": 10}
TWO_WORKERS = {"num_workers": 2}
IMAGES = {"train": {"format": "parquet", "path": "data/images/train"},
          "valid": {"format": "parquet", "path": "data/images/valid"}}
TABLE = {"train": {"format": "csv", "path": "data/breast_cancer.csv"},
         "valid": {"format": "csv", "path": "data/breast_cancer.csv"}}
MLP = {"name": "mlp", "hidden_dims": [16], "num_classes": 2}
BY_ACCURACY = {"checkpoint_config": {"checkpoint_score_attribute": "accuracy",
                                     "checkpoint_score_order": "max"}}


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_image_parquet(root / "images" / "train", 256, seed=1)
    write_image_parquet(root / "images" / "valid", 64, seed=2, files=1)
    write_breast_cancer_csv(root / "breast_cancer.csv")
    return root


def write_experiment(folder: Path, data_dir: Path, name: str, **document) -> Path:
    """An experiment file in `folder`, its data under `folder/data`, its runs under
    `folder/results`. A run_config given adds to the storage_path, never replaces it (a run
    without it would go to Ray's default, ~/ray_results)."""
    link = folder / "data"
    if not link.exists():
        link.symlink_to(data_dir)
    run_config = {"storage_path": str(folder / "results"), **document.pop("run_config", {})}
    document = {"name": name, "run_config": run_config, **document}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture
def experiment(tmp_path, data_dir):
    """Write an experiment file next to the data: experiment(name, **document) -> path."""
    return lambda name, **document: write_experiment(tmp_path, data_dir, name, **document)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """`mlflow server` on a free loopback port, its database and artifacts in a temporary
    folder; stopped (its whole process group) at the end."""
    if not MLFLOW.exists():
        pytest.fail(f"{MLFLOW} is missing: scripts/setup-dev.sh installs the MLflow server there")
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = open(root / "server.log", "wb")  # noqa: SIM115 - open for the server's whole life
    process = subprocess.Popen(
        [str(MLFLOW), "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
         "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        # without MLflow 3's job runner: eight more Python processes (a runner and seven huey
        # consumers for its GenAI jobs) that no tracking test uses, about 60 CPU-s of a CI run
        env={**{k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING")},
             "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("mlflow server did not start:\n"
                                         + (root / "server.log").read_text()[-3000:]) from None
                time.sleep(0.5)
        yield url, root
    finally:
        with contextlib.suppress(ProcessLookupError):   # it may have died at start
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


@dataclass
class Trained:
    """A run trained once for the session, in a folder and an ORCHESTRATE_HOME of its own."""

    name: str
    path: Path                  # the experiment file
    home: Path                  # the ORCHESTRATE_HOME it ran under (its job and run records)
    summary: dict               # what `run --format json` printed
    err: str                    # what `run` printed on stderr
    extra: dict = field(default_factory=dict)   # what the run was given (a secret, a URL)

    def use(self, monkeypatch) -> None:
        """Make the run's home this test's: `predict`, `serve`, `results`, `runs` find it by
        name or by its file, and reach the shared Ray through it."""
        monkeypatch.setenv("ORCHESTRATE_HOME", str(self.home))

    def sibling(self, name: str, **changes) -> Path:
        """Another experiment beside this one: the same document with `changes`; same data,
        same storage, so the two differ only where `changes` says."""
        document = yaml.safe_load(self.path.read_text())
        document.update(name=name, **changes)
        path = self.path.parent / f"{name}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path


def cli(*args: str) -> tuple[int, str, str]:
    """orchestrate's main in this process: (exit code, stdout, stderr)."""
    from orchestrator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


class TrainedRuns:
    """Each kind trained the first time a test asks for it (a test run alone trains only what it
    reads); a run that fails fails every test that reads it, with its output."""

    def __init__(self, root: Path, data_dir: Path, shared_ray, request) -> None:
        self.root, self.data_dir, self.shared_ray, self.request = root, data_dir, shared_ray, request
        self.runs: dict[str, Trained] = {}
        self.failed: dict[str, str] = {}   # what `run` said, for every later test that asks

    def _train(self, name: str, args: tuple[str, ...] = (), env: dict | None = None,
               extra: dict | None = None, **document) -> Trained:
        if name not in self.runs and name not in self.failed:
            folder = self.root / name   # the run's working_dir: its ORCHESTRATE_HOME lies beside
            folder.mkdir()
            home = self.root / f"{name}-home"
            path = write_experiment(folder, self.data_dir, name, **document)
            with pytest.MonkeyPatch.context() as patch:
                for key, value in {"ORCHESTRATE_HOME": str(home), **(env or {})}.items():
                    patch.setenv(key, value)
                self.shared_ray.adopt()
                code, out, err = cli("run", str(path), "--format", "json", *args)
            if code == 0:
                self.runs[name] = Trained(name, path, home, json.loads(out), err, extra or {})
            else:
                self.failed[name] = err
        assert name in self.runs, f"the shared run {name} failed:\n{self.failed[name]}"
        return self.runs[name]

    @property
    def mlp(self) -> Trained:
        """An MLP on the breast-cancer CSV, 2 workers, 3 epochs, the best checkpoint by
        accuracy, tracked on the MLflow server (experiment "e2e", a tag) with a token in the
        environment (`extra["token"]`; the server ignores it); run with -v."""
        if "mlp" not in self.runs:
            url, server_root = self.request.getfixturevalue("mlflow_server")
            token = f"mlflow-tok-{secrets.token_hex(12)}"
            return self._train(
                "mlp", ("-v",), {"MLFLOW_TRACKING_TOKEN": token},
                {"token": token, "url": url, "server_root": server_root},
                trainer="torch", model=MLP, datasets=TABLE, label_column="target",
                preprocessors=[{"type": "StandardScaler"}], scaling_config=TWO_WORKERS,
                train_loop_config={"lr": 0.01, "epochs": 3, "batch_size_per_worker": 64},
                run_config=BY_ACCURACY,
                tracking={"mlflow": {"tracking_uri": url, "experiment_name": "e2e",
                                     "tags": {"team": "vision"}}})
        return self.runs["mlp"]

    @property
    def xgboost(self) -> Trained:
        """XGBoost on the CSV, 2 workers, 5 rounds, two columns scaled; tracked in a file store
        (`mlruns` beside the file) without artifacts."""
        return self._train(
            "xgb", ("--quiet",), trainer="xgboost", datasets=TABLE, label_column="target",
            preprocessors=[{"type": "StandardScaler", "columns": ["mean radius", "mean texture"]}],
            params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"],
                    "max_depth": 3},
            num_boost_round=5, scaling_config=TWO_WORKERS,
            tracking={"mlflow": {"tracking_uri": "mlruns", "log_artifacts": False}})


    @property
    def lightgbm(self) -> Trained:
        """LightGBM on the CSV as a Tune run of one trial (num_leaves 8), 2 workers training
        data-parallel for 5 rounds, two columns scaled, the trainer's default metric (the first
        of params.metric, on valid); tracked in a file store (`mlruns` beside the file). One run
        proves train, a Tune trial of a GBDT's `params` and tracking; predict and serve use its
        best checkpoint. One trial, not a grid: Tune choosing among trials is the torch grid's
        test (test_tracking.py), and a second trial here cost about 180 s of the ray tier."""
        return self._train(
            "lgbm", ("--quiet",), trainer="lightgbm", datasets=TABLE, label_column="target",
            preprocessors=[{"type": "StandardScaler", "columns": ["mean radius", "mean texture"]}],
            params={"objective": "binary", "metric": ["binary_logloss", "binary_error"],
                    "min_data_in_leaf": 5},
            num_boost_round=5, scaling_config=TWO_WORKERS,
            # Ray Train's LightGBM backend picks each worker's port free and LightGBM binds it
            # later: on a busy machine another process can take it first ("Binding port N
            # failed", ray/train/lightgbm/config.py). A retry starts the workers on new ports,
            # as docs/experiments.md advises users.
            run_config={"failure_config": {"max_failures": 1}},
            tune={"param_space": {"params": {"num_leaves": {"grid_search": [8]}}}},
            tracking={"mlflow": {"tracking_uri": "mlruns"}})


    @property
    def tensorflow(self) -> Trained:
        """A Keras MLP (`trainer: tensorflow`) on the CSV, 2 workers under
        MultiWorkerMirroredStrategy for 2 epochs, every feature scaled, the best checkpoint by
        accuracy; tracked in a file store (`mlruns` beside the file); predict and serve use its
        best checkpoint. A plain run, not a sweep: the path most users take; a Tune trial is
        the same for every trainer (the torch grid and the LightGBM trial prove it), and the
        2-trial Keras sweep this was cost about 200 s of the ray tier."""
        return self._train(
            "tf", ("--quiet",), trainer="tensorflow", model=MLP, datasets=TABLE,
            label_column="target", preprocessors=[{"type": "StandardScaler"}],
            train_loop_config={"lr": 0.05, "epochs": 2, "batch_size_per_worker": 64},
            scaling_config=TWO_WORKERS, run_config=BY_ACCURACY,
            tracking={"mlflow": {"tracking_uri": "mlruns"}})


@pytest.fixture(scope="session")
def _trained_runs(tmp_path_factory, data_dir, shared_ray, request) -> TrainedRuns:
    return TrainedRuns(tmp_path_factory.mktemp("trained"), data_dir, shared_ray, request)


@pytest.fixture
def trained(_trained_runs, local_ray) -> TrainedRuns:
    """The session's trained runs; the test also has the shared Ray as its local Ray (and what
    it leaves running there is stopped after it)."""
    return _trained_runs
