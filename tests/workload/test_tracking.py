"""`tracking.mlflow` end to end on the embedded local Ray: a real MLflow tracking server started
here on loopback (`mlflow server`, SQLite backend in a temporary folder, from the venv
scripts/setup.sh makes for it) and a plain file store; what the runs leave there read back with
MLflow's own client. Also `runs`, `results` over several runs, and what `run` shows at a
terminal."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.util.ports import free_port

from ..helpers import at_terminal, jobs_client
from .test_environment import files_holding

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
MLFLOW = REPO / ".venv-mlflow" / "bin" / "mlflow"
TABLE = {"train": {"format": "csv", "path": "data/breast_cancer.csv"},
         "valid": {"format": "csv", "path": "data/breast_cancer.csv"}}
MLP = {"name": "mlp", "hidden_dims": [16], "num_classes": 2}


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """`mlflow server` on a free loopback port, its database and artifacts in a temporary
    folder; stopped (its whole process group) at the end."""
    if not MLFLOW.exists():
        pytest.fail(f"{MLFLOW} is missing: scripts/setup.sh installs the MLflow server there")
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = open(root / "server.log", "wb")  # noqa: SIM115 - open for the server's whole life
    process = subprocess.Popen(
        [str(MLFLOW), "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
         "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING")},
             "MLFLOW_DISABLE_TELEMETRY": "true"})
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


def client(uri: str, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")   # a file store, as the job uses it
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def run_json(capsys, path: Path, *extra: str) -> tuple[dict, str]:
    code = main(["run", str(path), "--format", "json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out), err


def test_a_run_is_logged_to_the_server_and_its_token_nowhere(local_ray, experiment, mlflow_server,
                                                             capsys, monkeypatch):
    url, server_root = mlflow_server
    token = f"mlflow-tok-{secrets.token_hex(12)}"
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", token)   # the server has no auth: it ignores it
    path = experiment("tracked", trainer="torch", model=MLP, datasets=TABLE, label_column="target",
                      preprocessors=[{"type": "StandardScaler"}], scaling_config={"num_workers": 2},
                      train_loop_config={"lr": 0.01, "epochs": 3, "batch_size_per_worker": 64},
                      tracking={"mlflow": {"tracking_uri": url, "experiment_name": "e2e",
                                           "tags": {"team": "vision"}}})
    summary, err = run_json(capsys, path, "-v")
    tracked = summary["tracking"]
    assert "error" not in tracked and tracked["tracking_uri"] == url
    mlflow = client(url, monkeypatch)
    run = mlflow.get_run(tracked["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == summary["name"]
    assert mlflow.get_experiment(run.info.experiment_id).name == "e2e"
    params = run.data.params
    assert params["train_loop_config.lr"] == "0.01" and params["model.name"] == "mlp"
    assert params["model.hidden_dims"] == "[16]" and params["scaling_config.num_workers"] == "2"
    assert params["datasets.train"].endswith("breast_cancer.csv")   # the path the job read
    assert params["orchestrate.experiment_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert params["orchestrate.version"] == __import__("orchestrator").__version__
    assert run.data.tags["team"] == "vision" and run.data.tags["orchestrate.experiment"] == "tracked"
    for metric in ("loss", "accuracy", "train_loss"):
        points = mlflow.get_metric_history(run.info.run_id, metric)
        assert [p.step for p in points] == [1, 2, 3], metric        # one point per epoch
        assert run.data.metrics[metric] == pytest.approx(summary["metrics"][metric])  # the final
    artifacts = {a.path for a in mlflow.list_artifacts(run.info.run_id)}
    assert {"metrics.png", "summary.json", "experiment.json"} <= artifacts
    rendered = json.loads(Path(mlflow.download_artifacts(run.info.run_id, "experiment.json"))
                          .read_text())
    assert rendered["train_loop_config"]["lr"] == 0.01

    # The token reached nothing that is printed, rendered, kept or logged.
    assert main(["render", str(path)]) == 0
    rendered_text = capsys.readouterr().out
    job_id = _job_of(summary["name"])
    logs = jobs_client(local_ray).logs(job_id)
    info = jobs_client(local_ray).info(job_id)
    for where, text in {"run's output": err, "render": rendered_text, "job log": logs,
                        "job info": json.dumps(info.runtime_env)}.items():
        assert token not in text, where
    needle = token.encode()
    assert files_holding(Path(os.environ["ORCHESTRATE_HOME"]), needle) == []   # state, run's log
    assert files_holding(Path(local_ray.temp_dir), needle) == []
    assert files_holding(server_root, needle) == []                # not a param, tag or artifact
    assert files_holding(Path(summary["run_path"]), needle) == []


def _job_of(run_name: str) -> str:
    from orchestrator.state import State

    return State.here().store.run(run_name)["job_id"]


def test_a_tune_grid_is_a_parent_run_with_a_child_per_trial(local_ray, experiment, capsys,
                                                            monkeypatch):
    path = experiment("tracked-grid", trainer="torch", model=MLP, datasets=TABLE,
                      label_column="target", preprocessors=[{"type": "StandardScaler"}],
                      scaling_config={"num_workers": 1},
                      train_loop_config={"epochs": 2, "batch_size_per_worker": 64},
                      tune={"param_space": {"train_loop_config": {"lr": {"grid_search": [0.001, 0.05]}}},
                            "tune_config": {"metric": "accuracy", "mode": "max"}},
                      tracking={"mlflow": {"tracking_uri": "mlruns"}})   # a file store
    summary, err = run_json(capsys, path)
    store = str(path.parent / "mlruns")
    mlflow = client(store, monkeypatch)
    experiment_id = mlflow.get_experiment_by_name("tracked-grid").experiment_id
    runs = mlflow.search_runs([experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 2, [r.data.tags for r in runs]
    parent = parents[0]
    assert parent.info.run_id == summary["tracking"]["run_id"]
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert sorted(c.data.params["train_loop_config.lr"] for c in children) == ["0.001", "0.05"]
    for child in children:
        assert child.info.status == "FINISHED"
        assert [p.step for p in mlflow.get_metric_history(child.info.run_id, "accuracy")] == [1, 2]
    assert parent.data.params["tune.metric"] == "accuracy"
    assert parent.data.metrics["accuracy"] == pytest.approx(summary["metrics"]["accuracy"])
    assert "metrics.png" in {a.path for a in mlflow.list_artifacts(parent.info.run_id)}
    # the progress lines: each trial's state and epochs, nothing of Ray's own log
    assert re.search(r"^trial \w+  terminated  lr=0\.05$", err, re.MULTILINE), err
    assert re.search(r"^» trial \w+  epoch 2/2  ", err, re.MULTILINE), err
    assert "Active & requested resources" not in err

    # results: the trials ranked by the tuned metric, with the parameter that differs
    assert main(["results", summary["name"]]) == 0
    out = capsys.readouterr().out
    table = out[out.index("TRIAL"):].splitlines()
    assert table[0].split()[:3] == ["TRIAL", "lr", "accuracy"]
    values = [float(line.split()[2]) for line in table[1:3]]
    assert values == sorted(values, reverse=True)                  # best first (mode max)


def test_a_user_loop_logs_to_the_same_run_through_the_helper(local_ray, experiment, tmp_path,
                                                             capsys, monkeypatch):
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "train.py").write_text('''
import ray.train
from orchestrator.workload.tracking import mlflow_run


def train_loop_per_worker(config):
    mlflow = mlflow_run()          # rank 0: this run; rank 1: calls that do nothing
    for epoch in range(1, config["epochs"] + 1):
        mlflow.log_metric("custom", epoch * 10.0, step=epoch)
        ray.train.report({"epoch": epoch, "loss": 1.0 / epoch})
''')
    path = experiment("tracked-loop", trainer="torch", working_dir="loop",
                      train_loop="train:train_loop_per_worker",
                      train_loop_config={"epochs": 2}, scaling_config={"num_workers": 2},
                      tracking={"mlflow": {"tracking_uri": "mlruns"}})
    summary, _ = run_json(capsys, path)
    mlflow = client(str(path.parent / "mlruns"), monkeypatch)
    run_id = summary["tracking"]["run_id"]
    assert [(p.step, p.value) for p in mlflow.get_metric_history(run_id, "custom")] == \
        [(1, 10.0), (2, 20.0)]                                      # rank 0 only, once each
    assert [p.step for p in mlflow.get_metric_history(run_id, "loss")] == [1, 2]
    assert mlflow.get_run(run_id).data.params["train_loop"] == "train:train_loop_per_worker"


def test_xgboost_rounds_are_logged(local_ray, experiment, capsys, monkeypatch):
    path = experiment("tracked-xgb", trainer="xgboost", datasets=TABLE, label_column="target",
                      params={"objective": "binary:logistic", "eval_metric": ["logloss"],
                              "max_depth": 3},
                      num_boost_round=4, scaling_config={"num_workers": 2},
                      tracking={"mlflow": {"tracking_uri": "mlruns", "log_artifacts": False}})
    summary, _ = run_json(capsys, path)
    mlflow = client(str(path.parent / "mlruns"), monkeypatch)
    run = mlflow.get_run(summary["tracking"]["run_id"])
    assert run.data.params["params.max_depth"] == "3" and run.data.params["num_boost_round"] == "4"
    assert [p.step for p in mlflow.get_metric_history(run.info.run_id, "valid-logloss")] == \
        [1, 2, 3, 4]
    assert mlflow.list_artifacts(run.info.run_id) == []             # log_artifacts: false


def test_two_runs_compared_listed_and_shown_at_a_terminal(local_ray, experiment, tmp_path,
                                                          capsys):
    common = {"trainer": "torch", "model": MLP, "datasets": TABLE, "label_column": "target",
              "preprocessors": [{"type": "StandardScaler"}], "scaling_config": {"num_workers": 2}}
    slow = experiment("lr-small", **common,
                      train_loop_config={"lr": 0.001, "epochs": 3, "batch_size_per_worker": 64})
    fast = experiment("lr-large", **common,
                      train_loop_config={"lr": 0.05, "epochs": 3, "batch_size_per_worker": 64})
    # At a terminal, as a new user would run it: a status line, the epochs, not Ray's log.
    code, shown = at_terminal([sys.executable, "-m", "orchestrator", "run", str(slow)],
                              dict(os.environ), {})
    assert code == 0, shown
    assert re.search(r"epoch 3/3 · \d+:\d\d elapsed", shown), shown
    screen = re.sub(r"[^\n]*\r\x1b\[K", "", shown)   # what stays once status lines are redrawn
    assert len(re.findall(r"^» epoch \d/3  loss ", screen, re.MULTILINE)) == 3, screen
    log_path = Path(re.search(r"the job's whole log: (\S+) ", shown).group(1))
    assert "Active & requested resources" in log_path.read_text() or \
        "TrainController" in log_path.read_text()                   # kept in the file
    assert "TrainController" not in shown
    assert len(screen.splitlines()) < 40, screen
    capsys.readouterr()
    run_json(capsys, fast)

    assert main(["runs", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in listed] == ["lr-large", "lr-small"]   # newest first
    assert {r["status"] for r in listed} == {"SUCCEEDED"}
    assert all(r["metrics"]["loss"] > 0 and r["storage"] and r["wall_time_s"] > 0 for r in listed)
    assert main(["runs", str(slow), "--format", "json"]) == 0
    assert [r["run"] for r in json.loads(capsys.readouterr().out)] == ["lr-small"]

    plot = tmp_path / "compare.png"
    assert main(["results", "lr-small", "lr-large", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("train_loop_config.lr"))
    assert row.split()[1:] == ["0.001", "0.05"]
    assert "accuracy (best)" in out and "loss (final)" in out
    assert "train_loop_config.epochs" not in out                    # the same in both
    from PIL import Image

    with Image.open(plot) as image:
        assert image.format == "PNG" and image.size[0] >= 600 and image.size[1] >= 250
        colours = {image.convert("RGB").getpixel((x, y)) for x in range(0, image.size[0], 4)
                   for y in range(0, image.size[1], 4)}
    assert len(colours) > 20                                        # curves drawn, not a blank
    assert main(["results", "lr-small", "lr-large", "--format", "json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert compared["params"] == {"train_loop_config.lr": [0.001, 0.05]}
    assert set(compared["best"]) >= {"loss", "accuracy"} and Path(compared["plot"]).is_file()
