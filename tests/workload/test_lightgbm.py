"""`trainer: lightgbm` end to end on the embedded local Ray: the session's LightGBM run, a Tune
trial of two data-parallel workers tracked in MLflow, then `orchestrate predict` and
`orchestrate serve` of its best checkpoint, whose answers are checked against the same
checkpoint and fitted preprocessor applied here with LightGBM's own API."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from .binary import assert_predicted, assert_served
from .test_end_to_end import assert_results_written
from .test_predict import card_of
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
def test_a_tune_trial_is_tracked_and_predicted(trained, tmp_path, capsys, monkeypatch):
    lgbm = trained.lightgbm
    lgbm.use(monkeypatch)   # `predict` finds the Tune run as the experiment file's latest run
    summary = lgbm.summary
    assert_results_written(summary, metrics=METRICS)
    assert (summary["metric"], summary["mode"]) == ("valid-binary_logloss", "min")  # the default
    # one trial: its config holds the grid's value (`params` lists only what differs)
    assert [t["config"]["params"]["num_leaves"] for t in summary["trials"]] == [8]
    assert all(t["error"] is None and t["epochs"] == 5 for t in summary["trials"])
    assert summary["metrics"]["valid-binary_error"] < 0.2
    checkpoint, run, booster, card, preprocessor = best_of(summary)
    assert card["trainer"] == "lightgbm" and card["class_names"] == [0, 1]
    assert booster.current_iteration() == 5 and run.parent == Path(summary["run_path"])

    # tracked: the Tune run is a parent run, its trial a child with its five rounds
    mlflow = client(str(lgbm.path.parent / "mlruns"), monkeypatch)
    parent = mlflow.get_run(summary["tracking"]["run_id"])
    assert parent.data.params["tune.metric"] == "valid-binary_logloss"
    children = mlflow.search_runs([parent.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert [c.data.params["params.num_leaves"] for c in children] == ["8"]
    for child in children:
        assert child.info.status == "FINISHED"
        assert [m.step for m in mlflow.get_metric_history(child.info.run_id,
                                                          "valid-binary_logloss")] == [1, 2, 3, 4, 5]

    # predicted from the experiment file: its latest run (the Tune run), its best checkpoint
    assert_predicted(capsys, lgbm.path, tmp_path / "out", checkpoint,
                     lambda frame: expected(booster, card, preprocessor, frame), rtol=1e-6)


@pytest.mark.xdist_group("trained-boosted")
def test_the_best_checkpoint_is_served(trained, local_ray, tmp_path, capsys, monkeypatch):
    lgbm = trained.lightgbm
    lgbm.use(monkeypatch)
    checkpoint, _run, booster, card, preprocessor = best_of(lgbm.summary)
    assert_served(capsys, lgbm.path, tmp_path, "lgbm", checkpoint,
                  lambda frame: expected(booster, card, preprocessor, frame), rtol=1e-6)
