"""What every trainer's client module holds: the `Trainer` Protocol, and what the boosting
trainers share.

A trainer is one module (torch, xgboost, lightgbm) that satisfies `Trainer`: everything the
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
from ..yamlload import Document

POS_INT = {"type": "integer", "minimum": 1}


class Trainer(Protocol):
    """Everything the client knows about one trainer. Implemented by a module."""

    # Data members are read-only properties so that a module's constants satisfy them.
    @property
    def NAME(self) -> str:
        """The experiment's `trainer:` value (the schema's enum is the registry's names)."""

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
