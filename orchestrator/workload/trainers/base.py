"""What every trainer's cluster-side module holds: the `JobTrainer` Protocol.

A trainer is one module here (torch, xgboost, lightgbm) that builds its Ray Train trainer for a
resolved config and loads its checkpoints for `predict` and `serve`; `orchestrator/trainers/`
holds its client side (schema fields, checks, rendering, the progress line). Nothing else on the
cluster compares trainer names: it asks `workload.trainers.get(name)`. The frameworks (ray,
torch, xgboost, lightgbm) are imported inside the functions that use them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ...contract import BOOST_ROUNDS, JobConfig
from .. import data

Scores = Callable[[Any], Any]  # a batch (DataFrame or dict of arrays) -> numpy scores


@dataclass(frozen=True)
class Made:
    """A trainer ready to `fit()`, and the data as its model takes it (the model card is written
    from it; None: a user's own train loop, which leaves no card)."""
    trainer: Any
    prepared: data.Prepared | None


class JobTrainer(Protocol):
    """Everything the job knows about one `trainer:`. Implemented by a module."""

    @property
    def NAME(self) -> str:
        """The experiment's `trainer:` value (the same as its client module's)."""

    @property
    def CHECKPOINT_FILE(self) -> str:
        """The model's file in each checkpoint it reports (a folder holding it is a checkpoint)."""

    def make_trainer(self, config: JobConfig, run_config: Any) -> Made:
        """The Ray Train trainer for a resolved config (Tune calls this once per trial)."""

    def default_metric(self, config: JobConfig) -> tuple[str, str]:
        """Tune's metric and mode when `tune_config` names none: one it reports for sure."""

    def class_names(self, config: JobConfig) -> list[Any] | None:
        """The classes the model answers (as trained on), None for regression (model card)."""

    def load(self, checkpoint: str, card: dict[str, Any], use_gpu: bool) -> Scores:
        """The checkpoint's model as a function of a batch: (n, classes) probabilities, (n,)
        values, or (n,) class indices (`inference.Predictor` turns them into answers)."""


def boosting_job(config: JobConfig) -> tuple[data.Prepared, dict[str, Any]]:
    """What the tabular trainers (xgboost, lightgbm) share: the splits read and preprocessed
    (features stay columns; read once, so never cached by default) and what each worker's loop
    needs."""
    data.check_paths(config)
    prepared = data.ray_datasets(config, image=False, vector=False, cache_auto=False)
    job = {"label": config.get("label_column") or "label",
           "features": prepared.features,
           "params": dict(config.get("params") or {}),
           "num_boost_round": int(config.get("num_boost_round") or BOOST_ROUNDS),
           "splits": list(prepared.datasets)}
    return prepared, job


def valid_split(config: JobConfig) -> str:
    """The split a default metric is read on: `valid` when there is one."""
    return "valid" if "valid" in (config.get("datasets") or {}) else "train"
