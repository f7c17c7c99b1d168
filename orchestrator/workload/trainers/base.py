"""What every trainer's cluster-side module holds: the `JobTrainer` Protocol.

A trainer is one module here (torch, tensorflow, xgboost, lightgbm) that builds its Ray Train trainer for a
resolved config and loads its checkpoints for `predict` and `serve`; `orchestrator/trainers/`
holds its client side (schema fields, checks, rendering, the progress line). Nothing else on the
cluster compares trainer names: it asks `workload.trainers.get(name)`. The frameworks (ray,
torch, tensorflow, xgboost, lightgbm) are imported inside the functions that use them.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from ...contract import BOOST_ROUNDS, JobConfig
from .. import data, models

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

    @property
    def ENVIRONMENT(self) -> Mapping[str, str]:
        """Variables its framework reads at import, set (unless already set) in every process
        of a job (`worker.setup`), before anything imports it."""

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


def import_train_loop(reference: str) -> Callable[..., None]:
    """A user's `train_loop`, `"module:function"`, importable from the working directory."""
    module_name, _, function = reference.partition(":")
    return cast(Callable[..., None], getattr(importlib.import_module(module_name), function))


def network_data(config: JobConfig) -> data.Prepared | None:
    """A network trainer's (torch, tensorflow) splits through Ray Data, or None without
    datasets: for a built-in model, tabular features as one float32 vector column
    (`data.FEATURES`) and images uint8 as read (the loop normalises them); for a user's loop,
    the columns, and images normalised."""
    if not config.get("datasets"):
        return None
    data.check_paths(config)
    builtin = not config.get("train_loop")
    return data.ray_datasets(config, image=models.is_image_model(config.get("model")),
                             vector=builtin, raw_images=builtin,
                             cache_auto=data.cache_by_default(config))


def network_metric(config: JobConfig) -> tuple[str, str]:
    """A network trainer's default Tune metric: the built-in loop's validation loss."""
    return "loss", "min"


def network_class_names(config: JobConfig) -> list[Any] | None:
    """A built-in model's classes: 0 .. num_classes - 1."""
    model = config.get("model") or {"name": "", "args": {}}
    count = (model.get("args") or {}).get("num_classes", models.default_classes(model["name"]))
    return list(range(int(count)))
