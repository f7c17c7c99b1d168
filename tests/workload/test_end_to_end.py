"""`orchestrate run` end to end on the embedded local Ray (the suite's shared one), 2 workers,
small synthetic data.

ViT over Ray Data is trained (and its results checked) in test_predict.py, which then predicts
with it; the MLP and XGBoost runs the other tests read are trained once (`trained`, in
conftest.py), and a Tune grid is run in test_tracking.py."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator.cli import main

from .conftest import IMAGES, TINY_VIT, TWO_WORKERS

pytestmark = [pytest.mark.ray]


def run_json(capsys, path: Path, *extra: str, quiet: bool = True) -> tuple[int, dict, str]:
    code = main(["run", str(path), *(["--quiet"] if quiet else []), "--format", "json", *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 and out.strip() else {}), err


def assert_results_written(summary: dict, metrics=("loss", "accuracy")) -> None:
    assert summary["status"] == "SUCCEEDED"
    for metric in metrics:
        assert metric in summary["metrics"]
    assert Path(summary["history_csv"]).read_text().count("\n") >= 2  # header + a row
    assert Path(summary["plot"]).read_bytes().startswith(b"\x89PNG")
    assert Path(summary["best_checkpoint"]).is_dir()


def test_vit_over_dataloader(local_ray, experiment, capsys):
    path = experiment("vit-dataloader", trainer="torch", model=TINY_VIT, datasets=IMAGES,
                      data_loader="torch", scaling_config=TWO_WORKERS,
                      train_loop_config={"epochs": 1, "batch_size_per_worker": 32})
    code, summary, err = run_json(capsys, path)
    assert code == 0, err
    assert_results_written(summary)
    # where the time went: every phase measured, none negative, together the wall time
    phases = summary["phases"]
    assert set(phases) == {"submit", "job start", "driver", "data", "workers", "epochs",
                           "shutdown", "results", "end"}
    assert all(seconds >= 0 for seconds in phases.values())
    assert phases["workers"] > 0 and phases["data"] > 0
    assert abs(sum(phases.values()) - summary["wall_time_s"]) < 1.0
    assert "timing" not in summary


LOOP = '''
import ray.train, torch
from orchestrator.workload.tracking import mlflow_run

def train(config):
    model = ray.train.torch.prepare_model(torch.nn.Linear(1, 1))
    mlflow = mlflow_run()   # rank 0: the run's MLflow; rank 1, or no tracking: calls do nothing
    for epoch in range(config["epochs"]):
        if config.get("fail"):
            raise ValueError("boom in the user's loop")
        mlflow.log_metric("custom", (epoch + 1) * 10.0, step=epoch + 1)
        ray.train.report({"epoch": epoch, "loss": 1.0 / (epoch + 1), "seen": config["marker"]})
'''


def user_loop(experiment, tmp_path: Path, name: str, tracking: dict | None = None,
              **loop_config) -> Path:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "myloop.py").write_text(LOOP)
    return experiment(name, trainer="torch", working_dir="code", train_loop="myloop:train",
                      train_loop_config={"epochs": 2, "marker": 7, **loop_config},
                      scaling_config=TWO_WORKERS, **({"tracking": tracking} if tracking else {}))


def jobs_of(capsys, experiment: str) -> list[dict]:
    """`jobs --format json`, this experiment's rows (the shared Ray ran other tests' jobs)."""
    assert main(["jobs", "--format", "json"]) == 0
    return [row for row in json.loads(capsys.readouterr().out) if row["experiment"] == experiment]


def test_user_loop_tracked_and_no_duplicate(local_ray, experiment, tmp_path, capsys, monkeypatch):
    path = user_loop(experiment, tmp_path, "own-loop", tracking={"mlflow": {"tracking_uri": "mlruns"}})
    code, summary, err = run_json(capsys, path)
    assert code == 0, err
    assert summary["metrics"]["seen"] == 7  # train_loop_config reached the user's function
    assert [row["epoch"] for row in json.loads(Path(summary["history"]).read_text())] == [0, 1]
    # The loop's own MLflow calls (`mlflow_run()`) went to the run orchestrate made, rank 0 only,
    # beside the epochs orchestrate logs itself.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    mlflow = MlflowClient(tracking_uri=str(tmp_path / "mlruns"))
    run_id = summary["tracking"]["run_id"]
    assert [(p.step, p.value) for p in mlflow.get_metric_history(run_id, "custom")] == \
        [(1, 10.0), (2, 20.0)]
    assert [p.step for p in mlflow.get_metric_history(run_id, "loss")] == [0, 1]   # as reported
    assert mlflow.get_run(run_id).data.params["train_loop"] == "myloop:train"

    code, _, err = run_json(capsys, path)  # unchanged: the same job, not a second one
    assert code == 0 and "already exists" in err
    [job] = jobs_of(capsys, "own-loop")

    # `results` finds the run by its name, its job id and its folder (read where the run wrote
    # it); a key that is none of these is a clear error.
    for key in ("own-loop", job["job_id"], summary["run_path"]):
        assert main(["results", key, "--format", "json"]) == 0, key
        found = json.loads(capsys.readouterr().out)
        assert (found["name"], found["metrics"]) == ("own-loop", summary["metrics"]), key
    assert main(["results", job["job_id"]]) == 0   # as a table
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == ["RUN", "own-loop", "SUCCEEDED"]
    assert f"run folder     {summary['run_path']}" in table
    assert main(["results", "no-such-run"]) == 1
    assert "ERROR no results for 'no-such-run'" in capsys.readouterr().err

    # --force submits a second job (detached: that it is a new job is the point, not its run)
    code, forced, err = run_json(capsys, path, "--force", "--detach")
    assert code == 0, err
    assert forced["created"] is True
    listed = jobs_of(capsys, "own-loop")
    assert len(listed) == 2 and forced["job_id"] in json.dumps(listed)
    assert main(["stop", forced["job_id"]]) == 0


def test_failing_user_loop(local_ray, experiment, tmp_path, capsys):
    code, _, err = run_json(capsys, user_loop(experiment, tmp_path, "bad-loop", fail=True))
    assert code == 1
    assert "boom in the user's loop" in err  # from the job's last log lines
    assert "last lines of the job's log" in err


def test_bad_dataset_path(local_ray, experiment, capsys):
    path = experiment("bad-path", trainer="xgboost", label_column="target",
                      datasets={"train": {"format": "csv", "path": "file:///nonexistent/x.csv"}},
                      params={"objective": "binary:logistic"}, num_boost_round=2,
                      scaling_config=TWO_WORKERS)
    code, _, err = run_json(capsys, path)
    assert code == 1
    # Ray Data's own error for the missing file, as the job's result and its failure
    assert re.search(r"^ERROR job orchestrate-bad-path-\w+ failed: "
                     r"FileNotFoundError: /nonexistent/x\.csv$", err, re.MULTILINE), err


def test_detach_then_stop(local_ray, experiment, tmp_path, capsys):
    path = user_loop(experiment, tmp_path, "long-loop", epochs=100000)
    assert main(["run", str(path), "--detach"]) == 0
    job_id = capsys.readouterr().out.strip()
    assert main(["run", str(path), "--detach", "--format", "json"]) == 0  # the same job, as JSON
    assert json.loads(capsys.readouterr().out) == {"job_id": job_id, "created": False,
                                                   "cluster": None}
    assert main(["stop", job_id]) == 0
    from tests.helpers import jobs_client

    assert jobs_client(local_ray)._wait(job_id) == "STOPPED"
    for verb in ("logs", "stop"):   # a job the local Ray does not know
        assert main([verb, "no-such-job"]) == 1
        assert "ERROR no job 'no-such-job' on the embedded Ray" in capsys.readouterr().err
