"""`format: images` before any Ray: what `validate` says about an images split (the model,
the train split, the path), the job driver's class names, and the limits on an uploaded image."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main

from ..workload.synthetic import write_image_folder


def validate(path: Path, capsys) -> tuple[int, list[str]]:
    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if line.startswith("ERROR")]


def line_of(path: Path, text: str) -> int:
    """The line of the file's first line holding `text`."""
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def write(folder: Path, **document) -> Path:
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "e", "trainer": "torch", **document},
                                   sort_keys=False))
    return path


@pytest.fixture
def tree(tmp_path) -> Path:
    write_image_folder(tmp_path / "images" / "train", ["cat", "dog"], 2, size=8)
    write_image_folder(tmp_path / "images" / "valid", ["cat", "dog"], 1, size=8)
    return tmp_path / "images"


def test_a_folder_tree_for_an_image_model_is_valid(tmp_path, tree, capsys):
    path = write(tmp_path, model={"name": "cnn"},
                 datasets={"train": {"format": "images", "path": "images/train"},
                           "valid": {"format": "images", "path": "images/valid"}})
    assert validate(path, capsys) == (0, [])


def test_a_listing_is_valid_and_its_suffix_does_not_contradict_the_format(tmp_path, tree,
                                                                            capsys):
    (tree / "train.csv").write_text("path,label\ntrain/cat/000.png,cat\ntrain/dog/000.png,dog\n")
    path = write(tmp_path, model={"name": "vit", "image_size": 32, "patch_size": 8},
                 datasets={"train": {"format": "images", "path": "images/train.csv"}})
    assert validate(path, capsys) == (0, [])


def test_images_need_an_image_model(tmp_path, tree, capsys):
    path = write(tmp_path, model={"name": "mlp"},
                 datasets={"train": {"format": "images", "path": "images/train"}})
    code, errors = validate(path, capsys)
    assert code == 1
    assert len(errors) == 1 and f"{path}:{line_of(path, 'format: images')}:" in errors[0]
    assert " datasets.train.format: " in errors[0]
    assert "format: images needs a model that takes images, and this experiment has model mlp" \
        in errors[0] and "{name: cnn}" in errors[0]


def test_images_with_a_boosting_trainer(tmp_path, tree, capsys):
    path = write(tmp_path, trainer="xgboost", label_column="label",
                 datasets={"train": {"format": "images", "path": "images/train"}})
    code, errors = validate(path, capsys)
    assert code == 1
    assert any("trainer xgboost without a model" in e and "datasets.train.format" in e
               for e in errors), errors


def test_a_users_train_loop_may_read_images(tmp_path, tree, capsys):
    (tmp_path / "loop.py").write_text("def train(config):\n    pass\n")
    path = write(tmp_path, train_loop="loop:train",
                 datasets={"train": {"format": "images", "path": "images/train"}})
    assert validate(path, capsys) == (0, [])


def test_an_image_file_is_no_images_split(tmp_path, tree, capsys):
    path = write(tmp_path, model={"name": "cnn"},
                 datasets={"train": {"format": "images", "path": "images/train/cat/000.png"}})
    code, errors = validate(path, capsys)
    assert code == 1
    assert len(errors) == 1 and " datasets.train.path: " in errors[0]
    assert "'images/train/cat/000.png' is a file and neither" in errors[0]


def test_a_listing_without_its_columns(tmp_path, tree, capsys):
    (tree / "train.csv").write_text("file,class\ntrain/cat/000.png,cat\n")
    path = write(tmp_path, model={"name": "cnn"},
                 datasets={"train": {"format": "images", "path": "images/train.csv"}})
    code, errors = validate(path, capsys)
    assert code == 1
    assert len(errors) == 1 and f"{path}:{line_of(path, 'path: images/train.csv')}:" in errors[0]
    assert "the image listing 'images/train.csv' has no column 'path', 'label' (it has: file, " \
           "class)" in errors[0]


def test_the_train_split_must_be_images_too(tmp_path, tree, capsys):
    (tree / "train.csv").write_text("path,label\n")
    path = write(tmp_path, model={"name": "cnn"},
                 datasets={"train": {"format": "csv", "path": "images/train.csv"},
                           "valid": {"format": "images", "path": "images/valid"}})
    code, errors = validate(path, capsys)
    assert code == 1
    assert any(" datasets.train.format: " in e and "so train must be too" in e for e in errors)


def test_the_drivers_class_names_and_the_models_class_count(tree):
    from orchestrator.workload.images import with_image_classes

    def config(valid: str, **model) -> dict:
        return {"name": "e", "trainer": "torch", "model": {"name": "cnn", "args": model},
                "datasets": {"train": {"format": "images", "path": str(tree / "train")},
                             "valid": {"format": "images", "path": str(tree / valid)}}}

    resolved = with_image_classes(config("valid"))
    assert resolved["datasets"]["valid"]["classes"] == ["cat", "dog"]
    assert resolved["datasets"]["train"]["image_size"] == 32          # the cnn's default
    assert resolved["model"]["args"]["num_classes"] == 2
    with pytest.raises(ValueError, match="model num_classes is 10, but the train split has 2 "
                                         "classes"):
        with_image_classes(config("valid", num_classes=10))
    write_image_folder(tree / "other", ["bird", "cat"], 1, size=8)
    with pytest.raises(ValueError, match="dataset 'valid' has class\\(es\\) 'bird' that the "
                                         "train split lacks"):
        with_image_classes(config("other"))


def png(width: int, height: int, mode: str = "RGB") -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new(mode, (width, height), 128).save(out, "PNG")
    return out.getvalue()


def test_decode_image_resizes_converts_and_refuses_what_is_too_big(monkeypatch):
    import numpy as np

    from orchestrator.workload import images

    decoded = images.decode_image(png(40, 20, "L"), 16)
    assert decoded.shape == (16, 16, 3) and decoded.dtype == np.uint8
    assert images.decode_image(png(5, 7)).shape == (7, 5, 3)
    with pytest.raises(ValueError, match="not an image Pillow can read"):
        images.decode_image(b"not an image")
    big = png(300, 300)
    monkeypatch.setattr(images, "MAX_PIXELS", 299 * 299)
    with pytest.raises(ValueError, match="the image is 300x300 pixels"):
        images.decode_image(big)
    monkeypatch.setattr(images, "MAX_UPLOAD_BYTES", len(big) - 1)
    with pytest.raises(ValueError, match="at most"):
        images.decode_image(big)


def test_decode_image_refuses_a_bomb_by_its_header():
    """A PNG that says it is 10000x10000 is refused before it is decoded."""
    from orchestrator.workload import images

    with pytest.raises(ValueError, match="10000x10000 pixels; at most 64M"):
        images.decode_image(png(10000, 10000, "1"))


def test_an_uploaded_image_becomes_the_models_row():
    import numpy as np

    from orchestrator.workload import rows

    card = {"image": True, "image_size": 16, "model": {"name": "cnn", "args": {}}}
    assert rows.is_image_upload({"content-type": "image/png; q=1"})
    assert not rows.is_image_upload({"content-type": "application/json"})
    assert not rows.is_image_upload({})
    for image in (png(20, 10), np.zeros((10, 20, 3), np.uint8), np.zeros((10, 20), np.uint8)):
        frame = rows.image_rows(image, card)
        assert list(frame.columns) == ["image"] and len(frame) == 1
        assert frame["image"][0].shape == (16, 16, 3) and frame["image"][0].dtype == np.uint8
    # an older card without image_size: the built-in model's own (the cnn's 32)
    assert rows.image_rows(png(8, 8), {"image": True, "model": {"name": "cnn", "args": {}}}) \
        ["image"][0].shape == (32, 32, 3)
    with pytest.raises(ValueError, match="this model takes table rows"):
        rows.image_rows(png(8, 8), {"image": False})
    with pytest.raises(ValueError, match="expected an image's bytes"):
        rows.image_rows("cat.png", card)


def test_an_image_answer_names_its_top_classes():
    from orchestrator.workload import rows

    predicted = [{"prediction": "dog", "probability_cat": 0.2, "probability_dog": 0.7,
                  "probability_frog": 0.1}]
    answer = rows.answer({"content-type": "image/jpeg"}, predicted)
    assert answer["predictions"] == predicted
    assert answer["top"] == [{"class": "dog", "confidence": 0.7},
                             {"class": "cat", "confidence": 0.2},
                             {"class": "frog", "confidence": 0.1}]
    assert rows.answer({"content-type": "application/json"}, predicted) == \
        {"predictions": predicted}
    assert [t["class"] for t in rows.top_classes(predicted[0], 1)] == ["dog"]


def test_class_folders_are_found_as_ray_data_reads_them(tmp_path):
    import shutil

    from orchestrator.workload.images import ImageLayout, classes_of, image_files

    root = tmp_path / "train"
    write_image_folder(root, ["cat", "dog"], 2, size=8)
    shutil.move(root / "cat" / "000.png", root / "cat" / "000.PNG")   # any case
    (root / "notes.txt").write_text("not an image")
    write_image_folder(root / ".ipynb_checkpoints", ["x"], 1, size=8)   # Ray Data skips these
    write_image_folder(root / "_tmp", ["y"], 1, size=8)
    assert sorted(image_files(str(root))) == ["cat/000.PNG", "cat/001.png", "dog/000.png",
                                              "dog/001.png"]
    assert classes_of(ImageLayout(str(root)), "label") == ["cat", "dog"]
    write_image_folder(root / "dog" / "puppies", ["small"], 1, size=8)
    with pytest.raises(ValueError, match="dog/puppies/small/000.png is not in one: a folder of "
                                         "images holds one folder per class"):
        classes_of(ImageLayout(str(root)), "label")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no image files"):
        classes_of(ImageLayout(str(tmp_path / "empty")), "label")


def test_a_flat_or_empty_folder_is_named_before_the_run(tmp_path, capsys):
    write_image_folder(tmp_path / "flat", ["cat"], 1, size=8)
    (tmp_path / "flat" / "cat" / "000.png").rename(tmp_path / "flat" / "000.png")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("no images")
    path = write(tmp_path, model={"name": "cnn"},
                 datasets={"train": {"format": "images", "path": "flat"},
                           "valid": {"format": "images", "path": "empty"}})
    code, errors = validate(path, capsys)
    assert code == 1 and len(errors) == 2
    assert " datasets.train.path: 'flat/000.png' is not in a class folder" in errors[0]
    assert " datasets.valid.path: 'empty' holds no image files" in errors[1]


def test_classes_the_train_split_lacks_and_a_wrong_class_count(tmp_path, tree, capsys):
    write_image_folder(tmp_path / "images" / "other", ["bird", "cat"], 1, size=8)
    path = write(tmp_path, model={"name": "cnn", "num_classes": 10},
                 datasets={"train": {"format": "images", "path": "images/train"},
                           "valid": {"format": "images", "path": "images/other"}})
    code, errors = validate(path, capsys)
    assert code == 1 and len(errors) == 2, errors
    assert " datasets.valid.path: class folder(s) 'bird' that datasets.train lacks (it has: " \
           "cat, dog)" in errors[0]
    assert f"{path}:{line_of(path, 'num_classes')}: model.num_classes: num_classes is 10, but " \
           "datasets.train has 2 class folders (cat, dog)" in errors[1]
