"""The job's MLflow side (workload.tracking) against a file store in a temporary folder, with
MLflow's own client: no Ray. Runs on the local Ray and a real server: test_tracking.py."""
from __future__ import annotations

import inspect

import pytest

from orchestrator.workload import tracking


def config(store, **extra):
    return {"name": "exp", "trainer": "torch", "train_loop_config": {"lr": 0.1, "epochs": 2},
            "model": {"name": "mlp", "args": {"hidden_dims": [8]}},
            "scaling_config": {"num_workers": 2, "use_gpu": False, "resources_per_worker": None},
            "datasets": {"train": {"path": "data/t.csv", "format": "csv"}},
            "tracking": {"tracking_uri": str(store), "experiment_name": "units", "tags": {"k": "v"},
                         "log_artifacts": True, "experiment_file": "/x/exp.yaml",
                         "experiment_sha256": "ab" * 32, "orchestrate_version": "0.1.0"},
            **extra}


def test_start_log_finish_and_resume(tmp_path):
    store, run_uri = tmp_path / "mlruns", str(tmp_path / "runs" / "exp")
    run = tracking.start(config(store), "exp", run_uri)
    for epoch in (1, 2):
        tracking.log_epoch(run, {"epoch": epoch, "loss": 1 / epoch, "ok": True, "note": "x"}, epoch)
    tracking.finish(run, {"metrics": {"loss": 0.5}}, {"summary.json": b"{}"}, log_artifacts=True)
    from mlflow.tracking import MlflowClient

    mlflow = MlflowClient(tracking_uri=str(store))
    found = mlflow.get_run(run.run_id)
    assert found.info.status == "FINISHED" and found.data.tags["k"] == "v"
    assert found.data.params["train_loop_config.lr"] == "0.1"
    assert found.data.params["orchestrate.experiment_sha256"] == "ab" * 32
    assert set(found.data.metrics) == {"loss"}            # no bools, strings or the epoch itself
    assert [a.path for a in mlflow.list_artifacts(run.run_id)] == ["summary.json"]
    # resume: the same MLflow run continues
    again = tracking.start(config(store, resume=True), "exp", run_uri)
    assert again.run_id == run.run_id and mlflow.get_run(run.run_id).info.status == "RUNNING"
    tracking.fail_open_runs()
    assert mlflow.get_run(run.run_id).info.status == "FAILED"
    assert tracking.start(config(store, tracking=None), "exp", run_uri) is None


def test_following_logs_the_epochs_as_the_history_grows_and_the_rest_at_the_end(tmp_path,
                                                                              monkeypatch):
    """What the controller appends to the run's history reaches MLflow from the waiting process:
    each row once, at its epoch, the last ones when `fit()` returns; a resumed run's earlier rows
    are not logged again."""
    import json
    import time

    from orchestrator.workload import storage

    monkeypatch.setattr(tracking, "POLL_SECONDS", 0.05)
    store, run_uri = tmp_path / "mlruns", str(tmp_path / "runs" / "exp")
    history_file = storage.join(run_uri, "orchestrate", "metrics.json")
    storage.write_bytes(history_file, json.dumps([{"epoch": 1, "loss": 0.9}]).encode())
    run = tracking.start(config(store), "exp", run_uri)
    from mlflow.tracking import MlflowClient

    mlflow = MlflowClient(tracking_uri=str(store))
    rows = [{"epoch": 1, "loss": 0.9}]
    with tracking.following(run, run_uri):
        for epoch in (2, 3):
            rows.append({"epoch": epoch, "loss": 1 / epoch, "checkpoint": "/c"})
            storage.write_bytes(history_file, json.dumps(rows).encode())
            deadline = time.monotonic() + 30
            while len(mlflow.get_metric_history(run.run_id, "loss")) < epoch - 1:
                assert time.monotonic() < deadline, "the epoch was not logged while running"
                time.sleep(0.05)
        storage.write_bytes(history_file, b"[{\"epoch\": 4, \"lo")   # caught mid-rewrite
        time.sleep(0.2)
        rows.append({"epoch": 4, "loss": 0.2})
        storage.write_bytes(history_file, json.dumps(rows).encode())
    points = mlflow.get_metric_history(run.run_id, "loss")
    assert [(p.step, p.value) for p in points] == [(2, 0.5), (3, 1 / 3), (4, 0.2)]


def test_following_warns_once_when_mlflow_fails_and_the_run_goes_on(tmp_path, capsys,
                                                                    monkeypatch):
    import json

    from orchestrator.workload import storage

    # MLflow's client retries a refused request for about four minutes by default (rate limits):
    # not here.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    run_uri = str(tmp_path / "run")
    gone = tracking.Run("http://127.0.0.1:9/", "1", "abc")   # port 9: nothing listens
    with tracking.following(gone, run_uri):
        storage.write_bytes(storage.join(run_uri, "orchestrate", "metrics.json"),
                            json.dumps([{"epoch": 1, "loss": 1.0}, {"epoch": 2, "loss": 0.5}])
                            .encode())
    out = capsys.readouterr().out
    assert out.count("MLflow logging failed, the run goes on without it") == 1, out


def test_a_user_loop_keeps_its_signature_and_is_called_as_ray_calls_it():
    seen = []

    def with_config(config):
        seen.append(("with", config, tracking._active[0].run_id))

    def optional(config=None):
        seen.append(("optional", config, tracking._active[0].run_id))

    def without():
        seen.append(("without", None, tracking._active[0].run_id))

    run = tracking.Run("/x", "1", "abc")
    for loop, args in ((with_config, ({"lr": 1},)), (optional, ()), (without, ())):
        wrapped = tracking.with_run(loop, run)
        assert inspect.signature(wrapped) == inspect.signature(loop)   # what Ray Train reads
        wrapped(*args)
    assert seen == [("with", {"lr": 1}, "abc"), ("optional", None, "abc"),
                    ("without", None, "abc")]
    assert tracking.with_run(without, None) is without
    tracking._active.clear()
    noop = tracking.mlflow_run()
    assert noop.log_metric("x", 1.0, step=1) is noop and noop.anything.at.all() is noop


def test_credentials_stay_out_of_what_is_shown():
    assert tracking.public_uri("https://ann:pw@host:5000/p") == "https://host:5000/p"
    assert tracking.public_uri("/tmp/mlruns") == "/tmp/mlruns"


def test_without_the_client_the_error_names_the_install(monkeypatch):
    import builtins

    real = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name.startswith("mlflow"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)
    with pytest.raises(ImportError, match=r"pip install mlflow-skinny"):
        tracking.client("/tmp/x")
