"""What the end-to-end tests of a binary classifier on the breast-cancer CSV check alike
(lightgbm, tensorflow): `orchestrate predict` and `orchestrate serve` of a run's best
checkpoint, each answer against P(class 1) computed in the test with the framework's own API
(`probability(frame)`)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.cli import main

from .test_predict import predict_json, read_predictions

Probability = Callable[[pd.DataFrame], np.ndarray]


def assert_predicted(capsys, experiment: Path, output: Path, checkpoint: Path,
                     probability: Probability, **tolerance: float) -> None:
    """`predict --evaluate` of the experiment file (its latest run's best checkpoint)."""
    data = experiment.parent / "data" / "breast_cancer.csv"
    code, predicted, err = predict_json(capsys, str(experiment), "--data", str(data),
                                        "--output", str(output), "--evaluate")
    assert code == 0, err
    assert predicted["checkpoint"] == str(checkpoint)
    frame = pd.read_csv(data)
    rows = read_predictions(Path(predicted["output"]))
    joined = rows.merge(frame.assign(expected=probability(frame)), on=list(frame.columns))
    assert len(joined) == len(frame) == predicted["rows"]
    np.testing.assert_allclose(joined["probability_1"], joined["expected"], **tolerance)
    assert (joined["prediction"] == (joined["expected"] > 0.5).astype(int)).all()
    accuracy = ((joined["expected"] > 0.5).astype(int) == joined["target"]).mean()
    assert predicted["metrics"]["accuracy"] == pytest.approx(accuracy)


def assert_served(capsys, experiment: Path, folder: Path, name: str, checkpoint: Path,
                  probability: Probability, **tolerance: float) -> None:
    """`serve` of the experiment file, then POST /predict of 20 rows, then `unserve`."""
    from .test_serve import call, serve_json, write_service

    service = write_service(folder, name, model={"experiment": str(experiment)},
                            route_prefix=f"/{name}", replicas=1, resources_per_replica={"cpus": 0.5})
    code, served, err = serve_json(capsys, service)
    assert code == 0, err
    try:
        assert served["status"] == "RUNNING" and served["checkpoint"] == str(checkpoint)
        frame = pd.read_csv(experiment.parent / "data" / "breast_cancer.csv").head(20)
        rows = frame.drop(columns=["target"]).to_dict(orient="records")
        status, answer = call(served["url"] + "/predict", rows, token=served["token"])
        assert status == 200, answer
        probabilities = [p["probability_1"] for p in answer["predictions"]]
        np.testing.assert_allclose(probabilities, probability(frame), **tolerance)
    finally:
        assert main(["unserve", name]) == 0
        capsys.readouterr()
