"""`tracking.mlflow` end to end on the embedded local Ray: a real MLflow tracking server started
on loopback (`mlflow server`, SQLite backend in a temporary folder, from the venv
scripts/setup-dev.sh makes for it; the `mlflow_server` fixture) and a plain file store; what the
runs leave there read back with MLflow's own client. The session's MLP and XGBoost runs
(`trained`) are the tracked runs read here; a user loop's own MLflow calls are in
test_end_to_end.py. Also a Tune grid, `runs`, `results` over several runs, and what `run`
shows at a terminal."""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

import pytest

from orchestrator.cli import main

from ..helpers import at_terminal, jobs_client
from .test_end_to_end import assert_results_written
from .test_environment import files_holding

pytestmark = [pytest.mark.ray]

TABLE = {"train": {"format": "csv", "path": "data/breast_cancer.csv"},
         "valid": {"format": "csv", "path": "data/breast_cancer.csv"}}
MLP = {"name": "mlp", "hidden_dims": [16], "num_classes": 2}


def client(uri: str, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")   # a file store, as the job uses it
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def run_json(capsys, path: Path, *extra: str) -> tuple[dict, str]:
    code = main(["run", str(path), "--format", "json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out), err


@pytest.mark.xdist_group("trained-mlp")
def test_a_run_is_logged_to_the_server_and_its_token_nowhere(trained, local_ray, capsys,
                                                             monkeypatch):
    mlp = trained.mlp   # run with MLFLOW_TRACKING_TOKEN set: the server has no auth, ignores it
    mlp.use(monkeypatch)
    path, summary, err = mlp.path, mlp.summary, mlp.err
    url, server_root, token = mlp.extra["url"], mlp.extra["server_root"], mlp.extra["token"]
    tracked = summary["tracking"]
    assert "error" not in tracked and tracked["tracking_uri"] == url
    mlflow = client(url, monkeypatch)
    run = mlflow.get_run(tracked["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == summary["name"]
    assert mlflow.get_experiment(run.info.experiment_id).name == "e2e"
    params = run.data.params
    assert params["train_loop_config.lr"] == "0.01" and params["model.name"] == "mlp"
    assert params["model.hidden_dims"] == "[16]" and params["scaling_config.num_workers"] == "2"
    assert params["datasets.train"] == "data/breast_cancer.csv"   # as written, not the job's copy
    assert params["orchestrate.experiment_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert params["orchestrate.version"] == __import__("orchestrator").__version__
    assert run.data.tags["team"] == "vision" and run.data.tags["orchestrate.experiment"] == "mlp"
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
    """The grid's two trials of one epoch (one worker each: they fit side by side on two
    CPUs), its best config and results, and its MLflow runs: a parent and a child per trial."""
    path = experiment("tracked-grid", trainer="torch", model=MLP, datasets=TABLE,
                      label_column="target", preprocessors=[{"type": "StandardScaler"}],
                      scaling_config={"num_workers": 1},
                      train_loop_config={"epochs": 1, "batch_size_per_worker": 64},
                      tune={"param_space": {"train_loop_config": {"lr": {"grid_search": [0.001, 0.05]}}},
                            "tune_config": {"metric": "accuracy", "mode": "max"}},
                      tracking={"mlflow": {"tracking_uri": "mlruns"}})   # a file store
    summary, err = run_json(capsys, path)
    assert len(summary["trials"]) == 2
    assert summary["best_config"]["train_loop_config"]["lr"] in (0.001, 0.05)
    assert_results_written(summary)
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
        assert child.data.params["datasets.valid"] == "data/breast_cancer.csv"
        assert [p.step for p in mlflow.get_metric_history(child.info.run_id, "accuracy")] == [1]
    assert parent.data.params["tune.metric"] == "accuracy"
    assert parent.data.metrics["accuracy"] == pytest.approx(summary["metrics"]["accuracy"])
    assert "metrics.png" in {a.path for a in mlflow.list_artifacts(parent.info.run_id)}
    # the progress lines: each trial's state and epochs, nothing of Ray's own log
    assert re.search(r"^trial \w+  terminated  lr=0\.05$", err, re.MULTILINE), err
    assert re.search(r"^» trial \w+  epoch 1/1  ", err, re.MULTILINE), err
    assert "Active & requested resources" not in err

    # results: the trials ranked by the tuned metric, with the parameter that differs
    assert main(["results", summary["name"]]) == 0
    out = capsys.readouterr().out
    table = out[out.index("TRIAL"):].splitlines()
    assert table[0].split()[:3] == ["TRIAL", "lr", "accuracy"]
    values = [float(line.split()[2]) for line in table[1:3]]
    assert values == sorted(values, reverse=True)                  # best first (mode max)


@pytest.mark.xdist_group("trained-boosted")
def test_xgboost_rounds_are_logged(trained, monkeypatch):
    xgb = trained.xgboost   # tracked in a file store beside its file, log_artifacts: false
    mlflow = client(str(xgb.path.parent / "mlruns"), monkeypatch)
    run = mlflow.get_run(xgb.summary["tracking"]["run_id"])
    assert run.data.params["params.max_depth"] == "3" and run.data.params["num_boost_round"] == "5"
    assert [p.step for p in mlflow.get_metric_history(run.info.run_id, "valid-logloss")] == \
        [1, 2, 3, 4, 5]
    assert mlflow.list_artifacts(run.info.run_id) == []             # log_artifacts: false


@pytest.mark.xdist_group("trained-mlp")
def test_a_second_run_shown_at_a_terminal_then_listed_and_compared(trained, tmp_path, capsys,
                                                                    monkeypatch):
    """The session's MLP (lr 0.01) and the same experiment with lr 0.05, run here at a terminal
    as a new user would: a status line, the epochs, not Ray's log. Then both listed and
    compared."""
    mlp = trained.mlp
    mlp.use(monkeypatch)   # the second run is recorded beside the first
    slow = mlp.path
    fast = mlp.sibling("lr-large", train_loop_config={"lr": 0.05, "epochs": 3,
                                                      "batch_size_per_worker": 64})
    code, shown = at_terminal([sys.executable, "-m", "orchestrator", "run", str(fast)],
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

    assert main(["runs", "--format", "json"]) == 0   # also the predictions other tests made
    listed = [r for r in json.loads(capsys.readouterr().out)
              if r["job_id"].startswith(("orchestrate-mlp-", "orchestrate-lr-large-"))]
    assert [r["run"] for r in listed] == ["lr-large", "mlp"]   # newest first
    assert {r["status"] for r in listed} == {"SUCCEEDED"}
    assert all(r["metrics"]["loss"] > 0 and r["storage"] and r["wall_time_s"] > 0 for r in listed)
    assert main(["runs", str(slow), "--format", "json"]) == 0
    assert [r["run"] for r in json.loads(capsys.readouterr().out)] == ["mlp"]

    plot = tmp_path / "compare.png"
    assert main(["results", "mlp", "lr-large", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("train_loop_config.lr"))
    assert row.split()[1:] == ["0.01", "0.05"]
    assert "accuracy (best)" in out and "loss (final)" in out
    assert "train_loop_config.epochs" not in out                    # the same in both
    assert "datasets." not in out and "orchestrate." not in out
    from PIL import Image

    with Image.open(plot) as image:
        assert image.format == "PNG" and image.size[0] >= 600 and image.size[1] >= 250
        colours = {image.convert("RGB").getpixel((x, y)) for x in range(0, image.size[0], 4)
                   for y in range(0, image.size[1], 4)}
    assert len(colours) > 20                                        # curves drawn, not a blank
    assert main(["results", "mlp", "lr-large", "--format", "json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    # What differs: the learning rate alone (not the job's copies of the data, nor the files'
    # hashes, which differ whenever anything does).
    assert compared["params"] == {"train_loop_config.lr": [0.01, 0.05]}
    assert set(compared["best"]) >= {"loss", "accuracy"} and Path(compared["plot"]).is_file()
