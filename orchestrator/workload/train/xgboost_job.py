"""`trainer: xgboost`: the legacy XGBoostTrainer(label_column, params, num_boost_round) contract,
written as the Train V2 per-worker function it now requires.

Each worker turns its shard of every split into a DMatrix, trains with all splits as evals
(metrics `train-logloss`, `valid-error`, ...) and reports each round with a checkpoint
(`RayTrainReportCallback(frequency=1)`), so a resumed run continues from the last round.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from ...contract import JobConfig
from .. import data


def make_trainer(config: JobConfig, run_config: Any, run_uri: str) -> Any:
    """The trainer; the run's model card (`workload.card`) goes to `run_uri`."""
    from ray.train.xgboost import XGBoostTrainer

    from .. import card
    from .configs import scaling_config

    data.check_paths(config)
    prepared = data.ray_datasets(config, image=False)
    datasets = prepared.datasets
    card.save(run_uri, config, prepared, image=False)
    job = {"label": config.get("label_column") or "label",
           "features": prepared.features,
           "params": dict(config.get("params") or {}),
           "num_boost_round": int(config.get("num_boost_round") or 10),
           "splits": list(datasets)}
    return XGBoostTrainer(functools.partial(train_loop, job=job), datasets=datasets,
                          scaling_config=scaling_config(config), run_config=run_config)


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
