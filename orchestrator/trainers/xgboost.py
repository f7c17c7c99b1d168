"""`trainer: xgboost`: XGBoost on a table (Ray's XGBoostTrainer; the job's side is
`workload/trainers/xgboost.py`).

Fields: `label_column` (needed), `params` (XGBoost's: objective, eval_metric, max_depth, ...),
`num_boost_round` (default `contract.BOOST_ROUNDS`), with `datasets` (a `train` split; each
split is evaluated every round: `train-logloss`, `valid-error`, ...), `preprocessors`,
`feature_columns`, `scaling_config`, `tune`.
"""
from __future__ import annotations

from typing import Any

from ..errors import Problem
from ..yamlload import Document
from .base import boosting_properties as properties
from .base import boosting_rounds as total_epochs
from .base import copied_as_written as job_fields
from .base import table_problems

NAME = "xgboost"
TITLE = "XGBoost"
ALIASES = ("xgb",)
FIELDS = ("params", "num_boost_round")

__all__ = ["ALIASES", "FIELDS", "NAME", "TITLE", "job_fields", "problems", "properties", "total_epochs"]


def problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    return table_problems(doc, data, NAME)
