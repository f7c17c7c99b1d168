"""`trainer: tensorflow`: Ray Train's TensorflowTrainer with Keras 3, a built-in model
(`model:` mlp or cnn, built in Keras) or the user's own `train_loop` (the job's side is
`workload/trainers/tensorflow.py`). Needs TensorFlow where the job runs
(`pip install 'orchestrate-ray[tensorflow]'`, the CPU build; a GPU machine installs
`tensorflow`)."""
from __future__ import annotations

from typing import Any

from ..errors import Problem
from ..yamlload import Document
from .base import TRAIN_LOOP, model_problems, model_properties
from .base import loop_epochs as total_epochs
from .base import network_job_fields as job_fields

NAME = "tensorflow"
TITLE = "TensorFlow with Keras"
ALIASES = ("keras", "tf", "tf-keras", "tf.keras", "tensorflow-keras", "tensorflow-cpu",
           "tensorflow-gpu", "tf2")
FIELDS = ("model", "train_loop")
MODELS = ("mlp", "cnn")   # the built-in models it builds in Keras (not the ViT)

__all__ = ["ALIASES", "FIELDS", "NAME", "TITLE", "job_fields", "problems", "properties",
           "total_epochs"]


def properties() -> dict[str, Any]:
    return {"model": model_properties(), "train_loop": dict(TRAIN_LOOP)}


def problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    return model_problems(doc, data, NAME, MODELS)
