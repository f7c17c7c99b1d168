"""What every trainer's client module holds: the `Trainer` Protocol, and what the boosting
trainers (xgboost, lightgbm) and the network trainers (torch, tensorflow) share.

A trainer is one module (torch, tensorflow, xgboost, lightgbm) that satisfies `Trainer`: everything the
client knows about one `trainer:` of an experiment file, from the schema of its fields and its
checks (Problems with file, line and field) to what it renders into the job and what the
progress line counts. What runs on the cluster (building the Ray trainer, loading a checkpoint)
is its other half, `orchestrator/workload/trainers/<name>.py`. Nothing outside these two
packages compares trainer names: it asks the module (`tests/test_trainers_guard.py`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..contract import BOOST_ROUNDS
from ..errors import Problem
from ..util.text import did_you_mean
from ..workload.models import MODELS
from ..yamlload import Document

POS_INT = {"type": "integer", "minimum": 1}


class Trainer(Protocol):
    """Everything the client knows about one trainer. Implemented by a module."""

    # Data members are read-only properties so that a module's constants satisfy them.
    @property
    def NAME(self) -> str:
        """The experiment's `trainer:` value (the schema's enum is the registry's names)."""

    @property
    def TITLE(self) -> str:
        """The framework's own name (`PyTorch`), said when a user writes one of its ALIASES."""

    @property
    def ALIASES(self) -> tuple[str, ...]:
        """Names people write for it (lower case: `pytorch`, `keras`); `validate` answers them
        with "did you mean" (`language.schema`)."""

    @property
    def FIELDS(self) -> tuple[str, ...]:
        """The experiment's top-level fields that only it (and other trainers naming them)
        accepts; any other trainer refuses them."""

    def properties(self) -> dict[str, Any]:
        """The JSON schema of each of its FIELDS (`scripts/experiment_schema.py` merges them;
        a field two trainers name has the same schema in both)."""

    def problems(self, doc: Document, data: dict[str, Any]) -> list[Problem]:
        """Its checks beyond the schema, on a document the schema has passed."""

    def job_fields(self, data: dict[str, Any]) -> dict[str, Any]:
        """The job config's values it interprets (the renderer copies every other field as
        written, and None where absent)."""

    def total_epochs(self, config: Mapping[str, Any]) -> int | None:
        """How many epochs (rounds) a run reports, for the progress line; None: unknown."""


FRACTIONS = ("dropout", "attention_dropout")


def model_properties() -> dict[str, Any]:
    """`model:` a built-in model (`workload.models.MODELS`) and its arguments; the same schema
    for every trainer that builds one (each refuses in `problems` the models it lacks)."""
    props: dict[str, Any] = {"name": {"type": "string", "enum": sorted(MODELS),
                                      "description": "the built-in model"}}
    for arg in sorted({a for model in MODELS.values() for a in model.args}):
        props[arg] = POS_INT
    for arg in FRACTIONS:
        props[arg] = {"type": "number", "minimum": 0, "maximum": 1}
    props["hidden_dims"] = {"type": "array", "items": POS_INT, "minItems": 1}
    return {"type": "object", "required": ["name"], "additionalProperties": False,
            "properties": props}


TRAIN_LOOP = {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$",
              "x-message": "expected 'module:function', e.g. 'train:train_loop'"}


def model_problems(doc: Document, data: dict[str, Any], name: str,
                   models: tuple[str, ...]) -> list[Problem]:
    """A network trainer's needs: a built-in model it has (`models`) with that model's
    arguments, or the user's own `train_loop`, not both; a built-in model's `train` split."""
    problems = []
    model = data.get("model")
    if model and model["name"] not in models:
        problems.append(doc.problem(("model", "name"), f"trainer {name} has no built-in model "
                                    f"'{model['name']}'", f"its models: {', '.join(models)}; "
                                    "or run your own training function with `train_loop:`"))
    elif model:
        allowed = MODELS[model["name"]].args
        problems += [
            doc.problem(("model", key), f"'{key}' is not an argument of model '{model['name']}'",
                        did_you_mean(key, allowed) or "arguments: " + ", ".join(allowed))
            for key in model if key != "name" and key not in allowed]
    if model and "train_loop" in data:
        problems.append(doc.problem(("train_loop",), "give either 'model' or 'train_loop', not both"))
    if not model and "train_loop" not in data:
        problems.append(doc.problem(("model",), f"a {name} experiment needs 'model' (a built-in "
                                    "model) or 'train_loop' (your own 'module:function')"))
    if model and "train" not in (data.get("datasets") or {}):
        problems.append(doc.problem(("datasets",), "a built-in model needs a 'train' dataset"))
    return problems


def network_job_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The model as `{name, args}`; the label column defaults to `label` for a built-in model."""
    model = data.get("model")
    return {"model": ({"name": model["name"], "args": {k: v for k, v in model.items() if k != "name"}}
                      if model else None),
            "label_column": data.get("label_column", "label" if model else None)}


def loop_epochs(config: Mapping[str, Any]) -> int | None:
    """A network trainer's epochs: `train_loop_config.epochs`, else the built-in loop's default
    (1); unknown for a user's own loop."""
    epochs = (config.get("train_loop_config") or {}).get("epochs")
    if isinstance(epochs, int):
        return epochs
    return None if config.get("train_loop") else 1


def boosting_properties() -> dict[str, Any]:
    """`params` and `num_boost_round`, the fields of the boosting trainers."""
    return {
        "params": {"type": "object", "description": (
            "the booster's parameters, as its library takes them (objective, metric, ...)")},
        "num_boost_round": {**POS_INT, "description": (
            f"boosting rounds, one epoch line and checkpoint each (default {BOOST_ROUNDS})")},
    }


def table_problems(doc: Document, data: dict[str, Any], name: str) -> list[Problem]:
    """A tabular trainer's needs: the label column and a train split."""
    problems = []
    if "label_column" not in data:
        problems.append(doc.problem(("label_column",), f"trainer {name} needs 'label_column'"))
    if "train" not in (data.get("datasets") or {}):
        problems.append(doc.problem(("datasets",), f"trainer {name} needs a 'train' dataset"))
    return problems


def boosting_rounds(config: Mapping[str, Any]) -> int | None:
    """A boosting trainer's epochs: its rounds."""
    return int(config.get("num_boost_round") or BOOST_ROUNDS)


def copied_as_written(data: dict[str, Any]) -> dict[str, Any]:
    """`job_fields` of a trainer whose fields all go to the job as written."""
    return {}
