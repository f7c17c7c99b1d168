"""`orchestrate predict` end to end on the embedded local Ray: predict with the checkpoint of a run
`orchestrate run` trained (the session's MLP and XGBoost runs, a ViT trained here), and check the
predictions against the same checkpoint and fitted preprocessor applied here, in this process,
without orchestrate's inference code."""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from orchestrator.cli import main

from .conftest import IMAGES, TINY_VIT, TWO_WORKERS
from .test_end_to_end import assert_results_written, run_json

pytestmark = [pytest.mark.ray]


def predict_json(capsys, *args: str) -> tuple[int, dict, str]:
    code = main(["predict", *args, "--format", "json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 and out.strip() else {}), err


def read_predictions(folder: Path) -> pd.DataFrame:
    return pq.read_table(folder).to_pandas()


def card_of(run: Path) -> tuple[dict, object]:
    """The model card and the fitted preprocessor, read the way a user would (Ray's own API)."""
    from ray.data.preprocessor import SerializablePreprocessorBase

    card = json.loads((run / "orchestrate" / "model.json").read_text())
    preprocessor = None
    if card["preprocessor"]:
        data = (run / "orchestrate" / "preprocessor.bin").read_bytes()
        preprocessor = SerializablePreprocessorBase.deserialize(
            data.decode() if card["preprocessor"] == "text" else data)
    return card, preprocessor


def torch_probabilities(checkpoint: Path, card: dict, x: np.ndarray) -> np.ndarray:
    import torch

    from orchestrator.workload.models import build_model

    model = build_model(card["model"], card["input_dim"])
    model.load_state_dict(torch.load(checkpoint / "model.pt", weights_only=True))
    model.eval()
    with torch.no_grad():
        return torch.softmax(model(torch.as_tensor(x)), dim=1).numpy()


@pytest.mark.xdist_group("trained-mlp")
def test_mlp_on_csv(trained, tmp_path, capsys, monkeypatch):
    """Predictions equal the in-process ones; --evaluate equals the run's own validation."""
    mlp = trained.mlp
    mlp.use(monkeypatch)
    path, result = mlp.path, mlp.summary
    assert_results_written(result)
    run = Path(result["run_path"])
    card, preprocessor = card_of(run)
    assert card["trainer"] == "torch" and card["class_names"] == [0, 1]
    assert card["label_column"] == "target" and "target" not in card["features"]
    assert card["input_dim"] == len(card["features"]) == 30
    written = (run / "orchestrate" / "preprocessor.bin").read_bytes()
    assert card["preprocessor_sha256"] == hashlib.sha256(written).hexdigest()
    checkpoint = Path(result["best_checkpoint"])
    metadata = json.loads((checkpoint / ".metadata.json").read_text())
    assert metadata["orchestrate_run"] == str(run)  # the checkpoint names its run

    data = path.parent / "data" / "breast_cancer.csv"
    code, summary, err = predict_json(capsys, str(path), "--data", str(data),
                                      "--output", str(tmp_path / "out"), "--evaluate")
    assert code == 0, err
    assert summary["checkpoint"] == str(checkpoint)
    frame = pd.read_csv(data)
    predicted = read_predictions(Path(summary["output"]))
    assert summary["rows"] == len(predicted) == len(frame)
    assert {"prediction", "probability_0", "probability_1", "target"} <= set(predicted.columns)

    # the same rows through the same checkpoint and preprocessor, here
    features = preprocessor.transform_batch(frame.copy())[card["features"]].to_numpy(np.float32)
    expected = torch_probabilities(checkpoint, card, features)
    joined = predicted.merge(frame.assign(expected_1=expected[:, 1]), on=list(frame.columns))
    assert len(joined) == len(frame)
    np.testing.assert_allclose(joined["probability_1"], joined["expected_1"], rtol=1e-5, atol=1e-6)
    assert (joined["prediction"] == (joined["expected_1"] > 0.5).astype(int)).all()

    # --evaluate on the validation split is the run's own validation of that checkpoint
    history = json.loads((run / "orchestrate" / "metrics.json").read_text())
    row = next(r for r in history if r.get("checkpoint") == str(checkpoint))
    assert abs(summary["metrics"]["accuracy"] - row["accuracy"]) <= 1 / len(frame)
    assert summary["metrics"]["loss"] == pytest.approx(row["loss"], rel=5e-3)  # float32 sums
    saved = json.loads((tmp_path / "out" / "predict_summary.json").read_text())
    assert saved["metrics"] == summary["metrics"] and saved["rows"] == len(frame)

    # the checkpoint folder alone is enough; CSV output; only the kept columns
    code, again, err = predict_json(capsys, str(checkpoint), "--data", str(data),
                                    "--output", str(tmp_path / "out-csv"), "--output-format",
                                    "csv", "--keep-columns", "mean radius")
    assert code == 0, err
    csv = pd.concat(pd.read_csv(f) for f in sorted(Path(again["output"]).glob("*.csv")))
    assert list(csv.columns) == ["mean radius", "prediction", "probability_0", "probability_1"]
    assert len(csv) == len(frame)

    check_errors(capsys, tmp_path, path, checkpoint, frame, data)


def check_errors(capsys, tmp_path: Path, path: Path, checkpoint: Path, frame: pd.DataFrame,
                 data: Path) -> None:
    """Each a clear message and exit 1, nothing written."""
    def fails(*args: str) -> str:
        code = main(["predict", *args])
        err = capsys.readouterr().err
        assert code == 1, err
        assert "Traceback" not in err.split("last lines of the job's log")[0]
        return err

    no_radius = tmp_path / "no-radius.csv"
    frame.drop(columns=["mean radius"]).to_csv(no_radius, index=False)
    err = fails(str(path), "--data", str(no_radius), "--output", str(tmp_path / "e1"))
    assert "the data has no column 'mean radius'" in err
    assert not (tmp_path / "e1" / "predictions").exists()

    unseen = tmp_path / "unseen.csv"
    frame.assign(target=7).to_csv(unseen, index=False)
    err = fails(str(path), "--data", str(unseen), "--output", str(tmp_path / "e2"), "--evaluate")
    assert "holds 7, which the model never learned" in err

    moved = tmp_path / "moved" / "checkpoint"
    shutil.copytree(checkpoint, moved)
    (moved / ".metadata.json").unlink()  # no way back to its run: no card, no preprocessor
    err = fails(str(moved), "--data", str(data), "--output", str(tmp_path / "e3"))
    assert "has no model card" in err

    tampered = tmp_path / "tampered"   # a checkpoint beside a copy of its run's card
    shutil.copytree(checkpoint, tampered / "checkpoint")
    (tampered / "checkpoint" / ".metadata.json").unlink()   # its run: the folder around it
    shutil.copytree(checkpoint.parent / "orchestrate", tampered / "orchestrate")
    with open(tampered / "orchestrate" / "preprocessor.bin", "ab") as changed:
        changed.write(b"\0")
    err = fails(str(tampered / "checkpoint"), "--data", str(data), "--output", str(tmp_path / "e5"))
    assert "does not match the digest its model card recorded" in err   # said by the job

    empty = tmp_path / "empty-run"
    (empty / "orchestrate").mkdir(parents=True)
    (empty / "orchestrate" / "metrics.json").write_text(json.dumps([{"epoch": 1, "loss": 1.0}]))
    err = fails(str(empty), "--data", str(data), "--output", str(tmp_path / "e4"))
    assert "has no checkpoint to predict with" in err

    err = fails(str(path), "--data", str(data), "--output", str(tmp_path / "out"))
    assert "already holds predictions" in err


@pytest.mark.xdist_group("trained-boosted")
def test_xgboost_from_its_run_folder(trained, tmp_path, capsys):
    xgb = trained.xgboost
    result = xgb.summary
    assert_results_written(result, metrics=("train-logloss", "valid-error"))
    assert result["metrics"]["valid-error"] < 0.2
    run = Path(result["run_path"])
    data = xgb.path.parent / "data" / "breast_cancer.csv"
    code, summary, err = predict_json(capsys, str(run), "--checkpoint", "latest", "--data", str(data),
                                      "--output", str(tmp_path / "out"), "--evaluate",
                                      "--workers", "2")
    assert code == 0, err
    history = json.loads((run / "orchestrate" / "metrics.json").read_text())
    last = history[-1]
    assert summary["checkpoint"] == last["checkpoint"]
    # Ray Train shards each split evenly across the two workers, dropping an odd last row: the
    # run's own metrics may be over one row fewer than this prediction saw
    rows = summary["rows"]
    assert abs(summary["metrics"]["accuracy"] - (1 - last["valid-error"])) <= 1 / rows + 1e-12
    assert summary["metrics"]["loss"] == pytest.approx(last["valid-logloss"], rel=2e-2)

    import xgboost

    card, preprocessor = card_of(run)
    frame = pd.read_csv(data)
    booster = xgboost.Booster()
    booster.load_model(str(Path(last["checkpoint"]) / "model.ubj"))
    features = preprocessor.transform_batch(frame.copy())[card["features"]]
    expected = booster.predict(xgboost.DMatrix(features))
    predicted = read_predictions(Path(summary["output"]))
    joined = predicted.merge(frame.assign(expected=expected), on=list(frame.columns))
    assert len(joined) == len(frame) == summary["rows"]
    np.testing.assert_allclose(joined["probability_1"], joined["expected"], rtol=1e-6)


def test_vit_over_ray_data_then_on_image_parquet(local_ray, experiment, tmp_path, capsys):
    path = experiment("vit-ray-data", trainer="torch", model=TINY_VIT, datasets=IMAGES,
                      train_loop_config={"epochs": 2, "batch_size_per_worker": 32},
                      scaling_config=TWO_WORKERS,
                      run_config={"checkpoint_config": {"num_to_keep": 1,
                                                        "checkpoint_score_attribute": "accuracy",
                                                        "checkpoint_score_order": "max"}})
    code, trained, err = run_json(capsys, path, "--verbose", quiet=False)   # Ray's log too
    assert code == 0, err
    assert_results_written(trained)
    assert trained["run_path"] == str(tmp_path / "results" / "vit-ray-data")  # not ~/ray_results
    assert "» epoch 1" in err and "» epoch 2" in err  # per-epoch progress while following
    # two epochs of a small dataset: both splits were cached, so epoch 2 read no file again
    assert "dataset 'train': cached in Ray's object store" in err
    assert "dataset 'valid': cached in Ray's object store" in err
    checkpoint = Path(trained["best_checkpoint"])
    assert (checkpoint / "model.pt").is_file()
    # `orchestrate results RUN` finds the same results afterwards
    assert main(["results", "vit-ray-data", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["best_checkpoint"] == str(checkpoint)

    # predictions with the best checkpoint, on the validation images
    card, _ = card_of(Path(trained["run_path"]))
    assert card["image"] and card["features"] == ["image"] and len(card["class_names"]) == 10
    valid = tmp_path / "data" / "images" / "valid"
    code, summary, err = predict_json(capsys, str(path), "--data", str(valid),
                                      "--output", str(tmp_path / "out"), "--evaluate",
                                      "--batch-size", "16")
    assert code == 0, err
    predicted = read_predictions(Path(summary["output"]))
    assert "image" not in predicted.columns  # images are not carried by default
    table = pq.read_table(valid).to_pandas()
    assert summary["rows"] == len(predicted) == len(table)
    assert summary["checkpoint"] == str(checkpoint)
    history = json.loads((Path(trained["run_path"]) / "orchestrate" / "metrics.json").read_text())
    row = next(r for r in history if r.get("checkpoint") == str(checkpoint))
    assert abs(summary["metrics"]["accuracy"] - row["accuracy"]) <= 1 / len(table)

    images = np.stack([np.asarray(x) for x in table["image"]]).astype(np.float32)
    x = ((images / 255.0 - 0.5) / 0.5).transpose(0, 3, 1, 2)
    expected = torch_probabilities(checkpoint, card, np.ascontiguousarray(x))
    # no key column in CIFAR's layout: compare the rows as sets of (label, probabilities)
    ours = np.sort(predicted[[f"probability_{c}" for c in range(10)]].to_numpy(), axis=0)
    np.testing.assert_allclose(ours, np.sort(expected, axis=0), rtol=1e-4, atol=1e-6)

    check_image_page(path, table["image"][0], tmp_path, capsys)


def check_image_page(path: Path, image: object, tmp_path: Path, capsys) -> None:
    """The ViT served with its demo page: a PNG uploaded to the Gradio page in Chromium shows
    the top classes and confidences `POST predict` answers for the same pixels."""
    from PIL import Image

    from .demo_browser import label_of, refused, same_answer, screenshot, signed_in, wait_for
    from .test_serve import call, serve_json, write_service

    service = write_service(tmp_path, "vit", model={"experiment": str(path)}, demo=True,
                            resources_per_replica={"cpus": 0.5})
    code, served, err = serve_json(capsys, service)
    assert code == 0, err
    url, token = served["url"], served["token"]
    pixels = np.asarray(image, dtype=np.uint8)
    assert pixels.shape == (32, 32, 3)
    png = tmp_path / "valid-0.png"
    Image.fromarray(pixels).save(png)
    with signed_in("vit", token, tmp_path / "profile-a") as (driver, report):
        wait_for(driver, "return document.querySelector('#image input[type=file]')")
        driver.find_element("css selector", "#image input[type=file]").send_keys(str(png))
        wait_for(driver, "return document.querySelector('#image img')")   # uploaded, shown
        driver.find_element("id", "predict").click()
        shown = label_of(driver)
        status, answer = call(url + "/predict", [{"image": pixels.tolist()}], token=token)
        assert status == 200, answer
        same_answer(shown, answer["predictions"][0], top=5)
        screenshot(driver, "demo-image.png")
        refused(url, "vit", report["sign_in_url"], tmp_path / "profile-b")
    assert main(["unserve", "vit"]) == 0
    capsys.readouterr()


def test_detach_returns_the_job_and_logs_find_it(local_ray, tmp_path, capsys):
    """--detach returns once submitted; the job is recorded, so `logs` needs no --cluster."""
    from tests.helpers import jobs_client

    empty = tmp_path / "empty-run"
    (empty / "orchestrate").mkdir(parents=True)
    (empty / "orchestrate" / "metrics.json").write_text("[]")
    data = tmp_path / "rows.csv"
    data.write_text("a,b\n1,2\n")
    code = main(["predict", str(empty), "--data", str(data), "--output", str(tmp_path / "o"),
                 "--detach", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    job_id = json.loads(out)["job_id"]
    assert job_id.startswith("orchestrate-predict-empty-run-")
    client = jobs_client(local_ray)
    deadline = time.monotonic() + 120
    while client.status(job_id) not in ("SUCCEEDED", "FAILED", "STOPPED"):
        assert time.monotonic() < deadline
        time.sleep(1)
    assert client.status(job_id) == "FAILED"
    assert main(["logs", job_id]) == 0
    out, err = capsys.readouterr()
    assert "has no checkpoint to predict with" in out + err
