"""`trainer: torch`: a TorchTrainer with a built-in model (`model:`, from
`workload.models.MODELS`) or the user's own `train_loop` (the job's side is
`workload/trainers/torch.py`)."""
from __future__ import annotations

from typing import Any

from ..errors import Problem
from ..workload.models import MODELS
from ..yamlload import Document
from .base import TRAIN_LOOP, model_problems, model_properties
from .base import loop_epochs as total_epochs
from .base import network_job_fields as job_fields

NAME = "torch"
TITLE = "PyTorch"
ALIASES = ("pytorch", "pytorch-lightning", "lightning")
FIELDS = ("model", "train_loop", "data_loader")
DATA_LOADERS = ("ray_data", "torch")   # `data_loader:` (torch: DataLoader + prepare_data_loader)

__all__ = ["ALIASES", "FIELDS", "NAME", "TITLE", "job_fields", "problems", "properties",
           "total_epochs"]


def properties() -> dict[str, Any]:
    return {"model": model_properties(), "train_loop": dict(TRAIN_LOOP),
            "data_loader": {"type": "string", "enum": list(DATA_LOADERS)}}


def problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    problems = model_problems(doc, data, NAME, tuple(MODELS)) + _vit_problems(doc, data)
    if data.get("data_loader") == DATA_LOADERS[1] and "train_loop" in data:
        problems.append(doc.problem(("data_loader",), "data_loader applies to built-in models; your "
                                    "train_loop reads its own data"))
    return problems


def _vit_problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    model = data.get("model") or {}
    if model.get("name") != "vit":
        return []
    problems = []
    if model.get("hidden_dim") and model.get("num_heads") and model["hidden_dim"] % model["num_heads"]:
        problems.append(doc.problem(("model", "hidden_dim"),
                                    f"hidden_dim ({model['hidden_dim']}) must be divisible by "
                                    f"num_heads ({model['num_heads']})"))
    if model.get("image_size") and model.get("patch_size") and model["image_size"] % model["patch_size"]:
        problems.append(doc.problem(("model", "patch_size"),
                                    f"image_size ({model['image_size']}) must be divisible by "
                                    f"patch_size ({model['patch_size']})"))
    return problems
