"""`trainer: tensorflow` before any Ray: what `validate` says about its fields and built-in
models, what the names people write for it suggest, and what the job config carries."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.language.experiment import load_experiment
from orchestrator.render.experiment import resolve_config
from orchestrator.run.progress import total_epochs

TABLE = {"train": {"format": "csv", "path": "train.csv"}}


def validate(path: Path, capsys) -> tuple[int, list[str]]:
    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if line.startswith("ERROR")]


def write(folder: Path, **document) -> Path:
    (folder / "train.csv").write_text("a,label\n1,0\n")
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "e", "trainer": "tensorflow", **document},
                                   sort_keys=False))
    return path


@pytest.mark.parametrize("model", [
    {"name": "mlp", "hidden_dims": [8], "num_classes": 2, "dropout": 0.1},
    {"name": "cnn", "image_size": 16, "channels": 1, "width": 8, "num_classes": 3},
])
def test_its_built_in_models_are_valid(tmp_path, capsys, model):
    assert validate(write(tmp_path, model=model, datasets=TABLE), capsys) == (0, [])


def test_the_vit_is_refused_with_the_models_it_has(tmp_path, capsys):
    path = write(tmp_path, model={"name": "vit", "image_size": 32}, datasets=TABLE)
    code, errors = validate(path, capsys)
    assert code == 1
    assert [e.split(None, 1)[1] for e in errors] == [
        f"{path}:4: model.name: trainer tensorflow has no built-in model 'vit' (its models: mlp, "
        "cnn; or run your own training function with `train_loop:`)"]


def test_a_model_argument_of_another_model_is_refused(tmp_path, capsys):
    path = write(tmp_path, model={"name": "mlp", "patch_size": 4}, datasets=TABLE)
    code, errors = validate(path, capsys)
    assert code == 1 and "'patch_size' is not an argument of model 'mlp'" in errors[0]


def test_a_torch_field_is_refused_and_a_model_or_loop_is_needed(tmp_path, capsys):
    path = write(tmp_path, data_loader="torch", datasets=TABLE)
    code, errors = validate(path, capsys)
    assert code == 1
    assert any("data_loader: 'data_loader' applies to trainer: torch only" in e for e in errors)
    assert any("a tensorflow experiment needs 'model' (a built-in model) or 'train_loop'" in e
               for e in errors)


@pytest.mark.parametrize("written", ["keras", "Keras", "tf", "tensorflow-keras", "tf.keras"])
def test_the_names_people_write_suggest_it(tmp_path, capsys, written):
    path = write(tmp_path, model={"name": "mlp"}, datasets=TABLE)
    path.write_text(path.read_text().replace("trainer: tensorflow", f"trainer: {written}"))
    code, errors = validate(path, capsys)
    assert code == 1
    assert errors[0].endswith("(did you mean 'tensorflow'? tensorflow is TensorFlow with Keras)")


def test_the_job_config_holds_the_model_and_the_epochs(tmp_path):
    path = write(tmp_path, model={"name": "mlp", "hidden_dims": [8]}, datasets=TABLE,
                 train_loop_config={"epochs": 4})
    config = resolve_config(load_experiment(path), environ={})
    assert config["trainer"] == "tensorflow"
    assert config["model"] == {"name": "mlp", "args": {"hidden_dims": [8]}}
    assert config["label_column"] == "label"   # a built-in model's default
    assert total_epochs(config) == 4
    assert total_epochs({**config, "train_loop": "m:f", "train_loop_config": {}}) is None
