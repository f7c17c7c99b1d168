"""`trainer: tensorflow` end to end on the embedded local Ray: the session's Keras MLP, two
workers under MultiWorkerMirroredStrategy, tracked in MLflow, then `orchestrate predict` and
`orchestrate serve` of its best checkpoint, whose answers are checked against the same
`model.keras` and fitted preprocessor applied here with Keras's own API; and the user's own
TensorFlow loop (experiments/keras-loop.yaml) as shipped."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from orchestrator.cli import main

from .binary import assert_predicted, assert_served
from .test_end_to_end import assert_results_written, run_json
from .test_predict import card_of
from .test_tracking import client

pytestmark = [pytest.mark.ray]
REPO = Path(__file__).resolve().parents[2]


def best_of(summary: dict) -> tuple[Path, Path, object, dict, object]:
    """The best checkpoint, its trial's run folder, its Keras model, card and preprocessor."""
    import keras

    checkpoint = Path(summary["best_checkpoint"])
    metadata = json.loads((checkpoint / ".metadata.json").read_text())
    assert metadata["_model_filename"] == "model.keras"   # as Ray's TensorflowCheckpoint named it
    run = Path(metadata["orchestrate_run"])
    card, preprocessor = card_of(run)
    model = keras.models.load_model(checkpoint / "model.keras", compile=False)
    return checkpoint, run, model, card, preprocessor


def expected(model, card: dict, preprocessor, frame: pd.DataFrame) -> np.ndarray:
    """P(class 1) per row, by Keras from the checkpoint's model."""
    import keras

    features = preprocessor.transform_batch(frame.copy())[card["features"]]
    logits = model(features.to_numpy(dtype=np.float32), training=False)
    return keras.ops.convert_to_numpy(keras.ops.softmax(logits, axis=1))[:, 1]


@pytest.mark.xdist_group("trained-tensorflow")
def test_a_keras_run_is_trained_tracked_and_predicted(trained, tmp_path, capsys, monkeypatch):
    tf_run = trained.tensorflow
    tf_run.use(monkeypatch)
    summary = tf_run.summary
    assert_results_written(summary)
    assert summary["metrics"]["accuracy"] > 0.85
    checkpoint, run, model, card, preprocessor = best_of(summary)
    assert card["trainer"] == "tensorflow" and card["class_names"] == [0, 1]
    assert json.loads((checkpoint / "state.json").read_text())["epoch"] in (0, 1)
    assert run == Path(summary["run_path"])
    # the best by accuracy (run_config): the kept checkpoint is the epoch with the highest
    history = json.loads((run / "orchestrate" / "metrics.json").read_text())
    assert [row["epoch"] for row in history] == [1, 2]
    best = max(history, key=lambda row: row["accuracy"])
    assert best.get("checkpoint") == str(checkpoint), history

    # tracked: one run, a point per epoch, the final metrics those of the summary
    mlflow = client(str(tf_run.path.parent / "mlruns"), monkeypatch)
    tracked = mlflow.get_run(summary["tracking"]["run_id"])
    assert tracked.info.status == "FINISHED" and tracked.info.run_name == summary["name"]
    assert tracked.data.params["train_loop_config.lr"] == "0.05"
    assert tracked.data.params["scaling_config.num_workers"] == "2"
    for metric in ("loss", "accuracy"):
        assert [m.step for m in mlflow.get_metric_history(tracked.info.run_id, metric)] == [1, 2]
        assert tracked.data.metrics[metric] == pytest.approx(summary["metrics"][metric])

    # `results` reads it as it reads torch's
    assert main(["results", summary["name"], "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"] == summary["metrics"]

    # predicted from the experiment file: its latest run, its best checkpoint
    assert_predicted(capsys, tf_run.path, tmp_path / "out", checkpoint,
                     lambda frame: expected(model, card, preprocessor, frame), rtol=1e-5, atol=1e-6)


@pytest.mark.xdist_group("trained-tensorflow")
def test_the_best_keras_checkpoint_is_served(trained, local_ray, tmp_path, capsys, monkeypatch):
    tf_run = trained.tensorflow
    tf_run.use(monkeypatch)
    checkpoint, _run, model, card, preprocessor = best_of(tf_run.summary)
    assert_served(capsys, tf_run.path, tmp_path, "keras", checkpoint,
                  lambda frame: expected(model, card, preprocessor, frame), rtol=1e-5, atol=1e-6)


def test_the_users_own_keras_loop_as_shipped(local_ray, tmp_path, capsys):
    """experiments/keras-loop.yaml: the loop builds its model under the strategy's scope, reads
    its shard of line.csv through to_tf, reports; its checkpoint loads in Keras."""
    import keras

    shutil.copytree(REPO / "experiments" / "keras_loop", tmp_path / "keras_loop")
    document = yaml.safe_load((REPO / "experiments" / "keras-loop.yaml").read_text())
    document["run_config"] = {"storage_path": str(tmp_path / "results")}
    path = tmp_path / "keras-loop.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    code, summary, err = run_json(capsys, path)
    assert code == 0, err
    history = json.loads(Path(summary["history"]).read_text())
    epochs = document["train_loop_config"]["epochs"]
    assert [row["epoch"] for row in history] == list(range(1, epochs + 1))
    assert history[-1]["loss"] < history[0]["loss"] / 10
    model = keras.models.load_model(Path(summary["best_checkpoint"]) / "model.keras")
    (kernel,), (bias,) = (w.ravel() for w in model.get_weights())
    assert abs(kernel - 3) < 0.5 and abs(bias + 1) < 0.2   # y = 3x - 1
