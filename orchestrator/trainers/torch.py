"""`trainer: torch`: a TorchTrainer with a built-in model (`model:`, from
`workload.models.MODELS`) or the user's own `train_loop` (the job's side is
`workload/trainers/torch.py`)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import Problem
from ..util.text import did_you_mean
from ..workload.models import MODELS
from ..yamlload import Document
from .base import POS_INT

NAME = "torch"
FIELDS = ("model", "train_loop", "data_loader")
DATA_LOADERS = ("ray_data", "torch")   # `data_loader:` (torch: DataLoader + prepare_data_loader)
FRACTIONS = ("dropout", "attention_dropout")


def properties() -> dict[str, Any]:
    return {
        "model": _model(),
        "train_loop": {
            "type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$",
            "x-message": "expected 'module:function', e.g. 'train:train_loop'"},
        "data_loader": {"type": "string", "enum": list(DATA_LOADERS)},
    }


def _model() -> dict[str, Any]:
    props: dict[str, Any] = {"name": {"type": "string", "enum": sorted(MODELS),
                                      "description": "the built-in model"}}
    for arg in sorted({a for model in MODELS.values() for a in model.args}):
        props[arg] = POS_INT
    for arg in FRACTIONS:
        props[arg] = {"type": "number", "minimum": 0, "maximum": 1}
    props["hidden_dims"] = {"type": "array", "items": POS_INT, "minItems": 1}
    return {"type": "object", "required": ["name"], "additionalProperties": False,
            "properties": props}


def problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    problems = _model_problems(doc, data)
    if "model" in data and "train_loop" in data:
        problems.append(doc.problem(("train_loop",), "give either 'model' or 'train_loop', not both"))
    if "model" not in data and "train_loop" not in data:
        problems.append(doc.problem(("model",), "a torch experiment needs 'model' (a built-in model) "
                                    "or 'train_loop' (your own 'module:function')"))
    if "model" in data and "train" not in (data.get("datasets") or {}):
        problems.append(doc.problem(("datasets",), "a built-in model needs a 'train' dataset"))
    if data.get("data_loader") == DATA_LOADERS[1] and "train_loop" in data:
        problems.append(doc.problem(("data_loader",), "data_loader applies to built-in models; your "
                                    "train_loop reads its own data"))
    return problems


def _model_problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    model = data.get("model")
    if not model:
        return []
    allowed = MODELS[model["name"]].args
    problems = [
        doc.problem(("model", key), f"'{key}' is not an argument of model '{model['name']}'",
                    did_you_mean(key, allowed) or "arguments: " + ", ".join(allowed))
        for key in model if key != "name" and key not in allowed
    ]
    if model["name"] == "vit":
        if model.get("hidden_dim") and model.get("num_heads") and model["hidden_dim"] % model["num_heads"]:
            problems.append(doc.problem(("model", "hidden_dim"),
                                        f"hidden_dim ({model['hidden_dim']}) must be divisible by "
                                        f"num_heads ({model['num_heads']})"))
        if model.get("image_size") and model.get("patch_size") and model["image_size"] % model["patch_size"]:
            problems.append(doc.problem(("model", "patch_size"),
                                        f"image_size ({model['image_size']}) must be divisible by "
                                        f"patch_size ({model['patch_size']})"))
    return problems


def job_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The model as `{name, args}`; the label column defaults to `label` for a built-in model."""
    model = data.get("model")
    return {"model": ({"name": model["name"], "args": {k: v for k, v in model.items() if k != "name"}}
                      if model else None),
            "label_column": data.get("label_column", "label" if model else None)}


def total_epochs(config: Mapping[str, Any]) -> int | None:
    epochs = (config.get("train_loop_config") or {}).get("epochs")
    if isinstance(epochs, int):
        return epochs
    return None if config.get("train_loop") else 1   # the built-in loop's default
