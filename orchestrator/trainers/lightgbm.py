"""`trainer: lightgbm`: LightGBM on a table, data-parallel (Ray Train V2's LightGBMTrainer; the
job's side is `workload/trainers/lightgbm.py`).

Fields, as for xgboost: `label_column` (needed), `params` (LightGBM's own: objective `binary`,
`multiclass` with `num_class`, or a regression; metric, num_leaves, learning_rate, ...; Ray sets
the network ones), `num_boost_round` (default `contract.BOOST_ROUNDS`), with `datasets` (a
`train` split; each split is evaluated every round: `train-binary_logloss`, `valid-l2`, ...),
`preprocessors`, `feature_columns`, `scaling_config`, `tune` (default metric: the first of
`params.metric`, else the objective's own, on `valid`). Needs the `lightgbm` package where the
job runs (`pip install 'orchestrate-ray[lightgbm]'`).
"""
from __future__ import annotations

from typing import Any

from ..errors import Problem
from ..yamlload import Document
from .base import boosting_properties as properties
from .base import boosting_rounds as total_epochs
from .base import copied_as_written as job_fields
from .base import table_problems

NAME = "lightgbm"
TITLE = "LightGBM"
ALIASES = ("lgbm", "lgb")
FIELDS = ("params", "num_boost_round")

__all__ = ["ALIASES", "FIELDS", "NAME", "TITLE", "job_fields", "problems", "properties", "total_epochs"]


def problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    return table_problems(doc, data, NAME)
