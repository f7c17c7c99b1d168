"""`format: images` end to end on the embedded local Ray: a small CNN trained once on a folder
of class folders (train) and a CSV listing (valid) of generated PNGs, then `orchestrate predict`
over a folder of images and `orchestrate serve` answering an uploaded image; the answers are
checked against the same checkpoint applied here, to the files read with Pillow."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from orchestrator.cli import main

from .conftest import Trained
from .synthetic import write_image_folder
from .test_predict import card_of, predict_json, read_predictions, torch_probabilities

pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("trained-images")]
CLASSES = ["cat", "dog", "frog"]


@pytest.fixture(scope="session")
def image_tree(tmp_path_factory) -> Path:
    """images/train/<class>/NNN.png (6 a class), images/valid/... (2 a class), and
    images/valid.csv listing the valid files (paths relative to it)."""
    root = tmp_path_factory.mktemp("images")
    write_image_folder(root / "train", CLASSES, 6, size=24, seed=1)
    files = write_image_folder(root / "valid", CLASSES, 2, size=24, seed=2)
    lines = [f"{f.relative_to(root).as_posix()},{f.parent.name}" for f in files]
    (root / "valid.csv").write_text("path,label\n" + "\n".join(lines) + "\n")
    return root


@pytest.fixture
def images_run(trained, image_tree) -> Trained:
    """The CNN (default image_size 32, so every PNG is resized) trained for 2 epochs."""
    return trained._train(
        "images", ("-v",), trainer="torch", model={"name": "cnn", "width": 8},
        datasets={"train": {"format": "images", "path": str(image_tree / "train")},
                  "valid": {"format": "images", "path": str(image_tree / "valid.csv")}},
        train_loop_config={"epochs": 2, "batch_size_per_worker": 8, "lr": 0.01},
        scaling_config={"num_workers": 1})


def expected(run: Trained, files: list[Path]) -> tuple[dict, np.ndarray]:
    """The model card, and the best checkpoint's probabilities for `files`, read here with
    Pillow and resized as `read_images` resizes."""
    from PIL import Image

    card, _ = card_of(Path(run.summary["run_path"]))
    pixels = []
    for file in files:
        with Image.open(file) as image:
            resized = image.resize((32, 32), resample=Image.BILINEAR).convert("RGB")
            pixels.append(np.asarray(resized, dtype=np.float32))
    x = ((np.stack(pixels) / 255.0 - 0.5) / 0.5).transpose(0, 3, 1, 2)
    return card, torch_probabilities(Path(run.summary["best_checkpoint"]), card,
                                     np.ascontiguousarray(x))


def test_a_folder_of_class_folders_trains_and_the_card_names_the_classes(images_run):
    summary = images_run.summary
    assert summary["status"] == "SUCCEEDED" and summary["metrics"]["epoch"] == 2
    assert 0 <= summary["metrics"]["accuracy"] <= 1
    card, _ = card_of(Path(summary["run_path"]))
    assert card["class_names"] == CLASSES and card["image_size"] == 32
    assert card["image"] and card["features"] == ["image"]
    assert card["model"]["args"]["num_classes"] == 3   # from the class folders
    # two epochs of small splits: both read once, into the object store
    assert "dataset 'train': cached in Ray's object store" in images_run.err
    assert "dataset 'valid': cached in Ray's object store" in images_run.err


def test_predict_over_a_folder_writes_a_row_per_file(images_run, image_tree, tmp_path, capsys,
                                                     monkeypatch):
    """Evaluated too: the class folders are the labels."""
    images_run.use(monkeypatch)
    folder = image_tree / "valid"   # found to be images by its files: no --data-format
    code, summary, err = predict_json(capsys, str(images_run.path), "--data", str(folder),
                                      "--output", str(tmp_path / "out"), "--evaluate")
    assert code == 0, err
    predicted = read_predictions(Path(summary["output"]))
    files = sorted(folder.rglob("*.png"))
    assert summary["rows"] == len(predicted) == len(files) == 6
    assert sorted(predicted["path"]) == [str(f) for f in files]
    assert "image" not in predicted.columns
    card, probabilities = expected(images_run, files)
    ours = predicted.set_index("path").loc[[str(f) for f in files]]
    np.testing.assert_allclose(ours[[f"probability_{c}" for c in CLASSES]].to_numpy(),
                               probabilities, rtol=1e-4, atol=1e-6)
    assert list(ours["prediction"]) == [CLASSES[i] for i in probabilities.argmax(axis=1)]
    assert list(ours["label"]) == [f.parent.name for f in files]
    right = [CLASSES[i] == f.parent.name for i, f in zip(probabilities.argmax(axis=1), files,
                                                          strict=True)]
    assert summary["metrics"]["accuracy"] == pytest.approx(np.mean(right))
    picked = [p[CLASSES.index(f.parent.name)] for p, f in zip(probabilities, files, strict=True)]
    assert summary["metrics"]["loss"] == pytest.approx(-np.mean(np.log(picked)), rel=1e-4)


def post(url: str, body: bytes, content_type: str, token: str) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": content_type, "Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_serve_answers_an_uploaded_image_with_its_top_classes(images_run, image_tree, tmp_path,
                                                             local_ray, capsys, monkeypatch):
    images_run.use(monkeypatch)
    service = tmp_path / "images.yaml"
    service.write_text(yaml.safe_dump({
        "name": "images", "model": {"experiment": str(images_run.path)},
        "route_prefix": "/images", "replicas": 1, "resources_per_replica": {"cpus": 0.5}}))
    code = main(["serve", str(service), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    served = json.loads(out)
    try:
        file = image_tree / "valid" / "dog" / "001.png"   # 32x32 RGB: taken as it is
        _, probabilities = expected(images_run, [file])
        status, answer = post(served["url"] + "/predict", file.read_bytes(), "image/png",
                              served["token"])
        assert status == 200, answer
        (row,) = answer["predictions"]
        assert row["prediction"] == CLASSES[int(probabilities[0].argmax())]
        top = answer["top"]
        assert [t["class"] for t in top] == [CLASSES[i] for i in np.argsort(-probabilities[0])]
        np.testing.assert_allclose([t["confidence"] for t in top],
                                   np.sort(probabilities[0])[::-1], rtol=1e-4, atol=1e-6)
        status, answer = post(served["url"] + "/predict", b"not a png", "image/png",
                              served["token"])
        assert status == 400 and "not an image Pillow can read" in answer["error"]
    finally:
        assert main(["unserve", "images"]) == 0
        capsys.readouterr()
