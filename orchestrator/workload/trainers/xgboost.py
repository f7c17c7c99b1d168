"""`trainer: xgboost`: the legacy XGBoostTrainer(label_column, params, num_boost_round) contract,
written as the Train V2 per-worker function it now requires.

Each worker turns its shard of every split into a DMatrix, trains with all splits as evals
(metrics `train-logloss`, `valid-error`, ...) and reports each round with a checkpoint
(`RayTrainReportCallback(frequency=1)`, `model.ubj`), so a resumed run continues from the last
round.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from ...contract import JobConfig
from ..configs import data_config, scaling_config
from .base import Made, Scores, boosting_job, valid_split

NAME = "xgboost"
CHECKPOINT_FILE = "model.ubj"   # Ray's XGBoost RayTrainReportCallback's
ENVIRONMENT: dict[str, str] = {}


def make_trainer(config: JobConfig, run_config: Any) -> Made:
    from ray.train.xgboost import XGBoostTrainer

    prepared, job = boosting_job(config)
    return Made(XGBoostTrainer(functools.partial(train_loop, job=job), datasets=prepared.datasets,
                               dataset_config=data_config(config),
                               scaling_config=scaling_config(config), run_config=run_config),
                prepared)


def train_loop(job: Mapping[str, Any]) -> None:
    import ray.train
    import xgboost
    from ray.train.xgboost import RayTrainReportCallback

    matrices: list[tuple[Any, str]] = []  # (xgboost.DMatrix, split)
    for split in job["splits"]:
        frame = ray.train.get_dataset_shard(split).materialize().to_pandas()
        matrices.append((xgboost.DMatrix(frame[job["features"]], label=frame[job["label"]]), split))
    checkpoint = ray.train.get_checkpoint()
    booster = RayTrainReportCallback.get_model(checkpoint) if checkpoint else None
    done = booster.num_boosted_rounds() if booster else 0
    xgboost.train(job["params"], dtrain=matrices[0][0], evals=matrices,
                  num_boost_round=max(job["num_boost_round"] - done, 0), xgb_model=booster,
                  callbacks=[RayTrainReportCallback(frequency=1)])


def default_metric(config: JobConfig) -> tuple[str, str]:
    return f"{valid_split(config)}-logloss", "min"


def class_names(config: JobConfig) -> list[Any] | None:
    params = config.get("params") or {}
    objective = str(params.get("objective", "reg:squarederror"))
    if objective.startswith("binary:"):
        return [0, 1]
    if objective.startswith("multi:"):
        return list(range(int(params.get("num_class", 2))))
    return None


def load(checkpoint: str, card: dict[str, Any], use_gpu: bool) -> Scores:
    from ray.train import Checkpoint
    from ray.train.xgboost import RayTrainReportCallback

    booster = RayTrainReportCallback.get_model(Checkpoint(checkpoint))
    return functools.partial(_scores, booster, card)


def _scores(booster: Any, card: dict[str, Any], batch: Any) -> Any:
    import numpy as np
    import pandas as pd
    import xgboost

    frame = pd.DataFrame({c: np.asarray(batch[c]) for c in card["features"]})
    raw = booster.predict(xgboost.DMatrix(frame))
    objective = str(card.get("objective") or "")
    if objective == "binary:logitraw":
        raw = 1.0 / (1.0 + np.exp(-raw))
    if objective.startswith("binary:") and raw.ndim == 1:
        return np.column_stack([1.0 - raw, raw])
    return raw
