"""The trainers an experiment may name: one module each, one explicit registry.

    get(name) -> Trainer          the module for an experiment's `trainer:`
    names()                       the schema's `trainer` enum (scripts/build_schemas.py; a test
                                  checks the committed schema against it)
    schema_properties()           the JSON schema of every trainer's own fields, merged
    foreign_problems(doc, data)   fields of other trainers, refused with the trainers they fit

Adding a trainer is one module here satisfying `base.Trainer`, its job side in
`orchestrator/workload/trainers/`, and a line in each registry (docs/design.md, "Trainers").
Nothing here imports a framework, so importing this is cheap.
"""
from __future__ import annotations

import copy
from typing import Any

from ..errors import Problem
from ..yamlload import Document
from . import lightgbm, tensorflow, torch, xgboost
from .base import Trainer

TRAINERS: dict[str, Trainer] = {torch.NAME: torch, xgboost.NAME: xgboost, lightgbm.NAME: lightgbm,
                                tensorflow.NAME: tensorflow}

__all__ = ["TRAINERS", "Trainer", "foreign_problems", "get", "names", "owners",
           "schema_properties"]


def get(name: str) -> Trainer:
    """The trainer module for `name`; the schema has refused any other name before this."""
    try:
        return TRAINERS[name]
    except KeyError:
        raise ValueError(f"orchestrate has no trainer {name!r}; trainers: "
                         f"{', '.join(names())}") from None


def names() -> list[str]:
    return sorted(TRAINERS)


def owners(field: str) -> list[str]:
    """The trainers that accept the top-level `field` (none: every trainer does)."""
    return [name for name in names() if field in TRAINERS[name].FIELDS]


def foreign_problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    """A field only other trainers accept, e.g. `params` in a torch experiment."""
    mine = get(data["trainer"]).FIELDS
    found = []
    for key in data:
        fit = owners(key)
        if fit and key not in mine:
            found.append(doc.problem((key,), f"'{key}' applies to trainer: {' or '.join(fit)} only"))
    return found


def schema_properties() -> dict[str, Any]:
    """Every trainer's fields with their JSON schema, each saying which trainers take it; a
    field two trainers name must have the same schema in both (ValueError otherwise)."""
    merged: dict[str, Any] = {}
    for name in names():
        for field, schema in TRAINERS[name].properties().items():
            if field in merged and merged[field] != schema:
                raise ValueError(f"trainers {', '.join(owners(field))} give '{field}' "
                                 f"different schemas")
            merged[field] = schema
    described = {}
    for field, schema in merged.items():
        fit = f"trainer: {', '.join(owners(field))}"
        described[field] = {**copy.deepcopy(schema), "description": (
            f"{schema['description']} ({fit})" if schema.get("description") else fit)}
    return described
