"""`trainer: lightgbm` end to end on the embedded local Ray: the session's LightGBM run, a Tune
sweep of two data-parallel trials tracked in MLflow, then `orchestrate predict` and
`orchestrate serve` of its best checkpoint, whose answers are checked against the same
checkpoint and fitted preprocessor applied here with LightGBM's own API."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.cli import main

from .test_end_to_end import assert_results_written
from .test_predict import card_of, predict_json, read_predictions
from .test_serve import call, serve_json, write_service
from .test_tracking import client

pytestmark = [pytest.mark.ray]
METRICS = ("train-binary_logloss", "valid-binary_logloss", "valid-binary_error")


def best_of(summary: dict) -> tuple[Path, Path, object, dict, object]:
    """The best checkpoint, its trial's run folder, its booster, card and preprocessor."""
    import lightgbm

    checkpoint = Path(summary["best_checkpoint"])
    run = Path(json.loads((checkpoint / ".metadata.json").read_text())["orchestrate_run"])
    card, preprocessor = card_of(run)
    booster = lightgbm.Booster(model_file=str(checkpoint / "model.txt"))
    return checkpoint, run, booster, card, preprocessor


def expected(booster, card: dict, preprocessor, frame: pd.DataFrame) -> np.ndarray:
    features = preprocessor.transform_batch(frame.copy())[card["features"]]
    return booster.predict(features.to_numpy(dtype=np.float64))


@pytest.mark.xdist_group("trained-boosted")
def test_a_sweep_is_tuned_tracked_and_predicted(trained, tmp_path, capsys, monkeypatch):
    lgbm = trained.lightgbm
    lgbm.use(monkeypatch)   # `predict` finds the sweep as the experiment file's latest run
    summary = lgbm.summary
    assert_results_written(summary, metrics=METRICS)
    assert (summary["metric"], summary["mode"]) == ("valid-binary_logloss", "min")  # the default
    assert sorted(t["params"]["params.num_leaves"] for t in summary["trials"]) == [4, 8]
    assert all(t["error"] is None and t["epochs"] == 5 for t in summary["trials"])
    assert summary["metrics"]["valid-binary_error"] < 0.2
    checkpoint, run, booster, card, preprocessor = best_of(summary)
    assert card["trainer"] == "lightgbm" and card["class_names"] == [0, 1]
    assert booster.current_iteration() == 5 and run.parent == Path(summary["run_path"])

    # tracked: the sweep is a parent run, each trial a child with its five rounds
    mlflow = client(str(lgbm.path.parent / "mlruns"), monkeypatch)
    parent = mlflow.get_run(summary["tracking"]["run_id"])
    assert parent.data.params["tune.metric"] == "valid-binary_logloss"
    children = mlflow.search_runs([parent.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(c.data.params["params.num_leaves"] for c in children) == ["4", "8"]
    for child in children:
        assert child.info.status == "FINISHED"
        assert [m.step for m in mlflow.get_metric_history(child.info.run_id,
                                                          "valid-binary_logloss")] == [1, 2, 3, 4, 5]

    # predicted from the experiment file: its latest run (the sweep), its best checkpoint
    data = lgbm.path.parent / "data" / "breast_cancer.csv"
    code, predicted, err = predict_json(capsys, str(lgbm.path), "--data", str(data),
                                        "--output", str(tmp_path / "out"), "--evaluate")
    assert code == 0, err
    assert predicted["checkpoint"] == str(checkpoint)
    frame = pd.read_csv(data)
    rows = read_predictions(Path(predicted["output"]))
    joined = rows.merge(frame.assign(expected=expected(booster, card, preprocessor, frame)),
                        on=list(frame.columns))
    assert len(joined) == len(frame) == predicted["rows"]
    np.testing.assert_allclose(joined["probability_1"], joined["expected"], rtol=1e-6)
    assert (joined["prediction"] == (joined["expected"] > 0.5).astype(int)).all()
    accuracy = ((joined["expected"] > 0.5).astype(int) == joined["target"]).mean()
    assert predicted["metrics"]["accuracy"] == pytest.approx(accuracy)


@pytest.mark.xdist_group("trained-boosted")
def test_the_best_checkpoint_is_served(trained, local_ray, tmp_path, capsys, monkeypatch):
    lgbm = trained.lightgbm
    lgbm.use(monkeypatch)
    service = write_service(tmp_path, "lgbm", model={"experiment": str(lgbm.path)},
                            route_prefix="/lgbm", replicas=1, resources_per_replica={"cpus": 0.5})
    code, served, err = serve_json(capsys, service)
    assert code == 0, err
    try:
        checkpoint, _run, booster, card, preprocessor = best_of(lgbm.summary)
        assert served["status"] == "RUNNING" and served["checkpoint"] == str(checkpoint)
        frame = pd.read_csv(lgbm.path.parent / "data" / "breast_cancer.csv").head(20)
        rows = frame.drop(columns=["target"]).to_dict(orient="records")
        status, answer = call(served["url"] + "/predict", rows, token=served["token"])
        assert status == 200, answer
        probabilities = [p["probability_1"] for p in answer["predictions"]]
        np.testing.assert_allclose(probabilities, expected(booster, card, preprocessor, frame),
                                   rtol=1e-6)
    finally:
        assert main(["unserve", "lgbm"]) == 0
        capsys.readouterr()
