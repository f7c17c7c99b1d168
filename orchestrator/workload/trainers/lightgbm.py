"""`trainer: lightgbm`: Ray Train V2's LightGBMTrainer, fed as the xgboost trainer is.

Each worker turns its shard of every split into a `lightgbm.Dataset` (the first, `train`, is
the reference of the others' bins), trains data-parallel with the network Ray Train set up
(`get_network_params`; `pre_partition`: each worker holds its own rows), with every split as a
valid set (metrics `train-binary_logloss`, `valid-l2`, ...), and reports each round with a
checkpoint (`RayTrainReportCallback(frequency=1)`, `model.txt`), so a resumed run continues
from the last round.

The experiment's fields are the xgboost trainer's: `label_column`, `params` (LightGBM's own:
objective, metric, num_leaves, learning_rate, ...), `num_boost_round` (default
`contract.BOOST_ROUNDS`), `datasets`, `preprocessors`, `feature_columns`, `scaling_config`.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from ...contract import JobConfig
from ..configs import data_config, scaling_config
from .base import Made, Scores, boosting_job, valid_split

NAME = "lightgbm"
CHECKPOINT_FILE = "model.txt"   # Ray's LightGBM RayTrainReportCallback's
ENVIRONMENT: dict[str, str] = {}
MULTICLASS = ("multiclass", "softmax", "multiclassova", "multiclass_ova", "ova", "ovr")
# LightGBM's default metric for an objective (its own default objective: regression).
METRIC_OF = {"binary": "binary_logloss", **dict.fromkeys(MULTICLASS, "multi_logloss")}
HIGHER_IS_BETTER = ("auc", "average_precision", "ndcg", "map", "auc_mu")


def make_trainer(config: JobConfig, run_config: Any) -> Made:
    from ray.train.lightgbm import LightGBMTrainer

    prepared, job = boosting_job(config)
    return Made(LightGBMTrainer(functools.partial(train_loop, job=job),
                                datasets=prepared.datasets,
                                dataset_config=data_config(config),
                                scaling_config=scaling_config(config), run_config=run_config),
                prepared)


def train_loop(job: Mapping[str, Any]) -> None:
    import lightgbm
    import ray.train
    from ray.train.lightgbm import (
        RayTrainReportCallback,
        get_network_params,
        normalize_pandas_for_lightgbm,
    )

    sets: list[Any] = []   # lightgbm.Dataset per split, train first
    for split in job["splits"]:
        frame = normalize_pandas_for_lightgbm(
            ray.train.get_dataset_shard(split).materialize().to_pandas())
        sets.append(lightgbm.Dataset(frame[job["features"]], label=frame[job["label"]],
                                     reference=sets[0] if sets else None))
    checkpoint = ray.train.get_checkpoint()
    booster = RayTrainReportCallback.get_model(checkpoint) if checkpoint else None
    done = booster.current_iteration() if booster else 0
    params = {"verbose": -1, **job["params"],
              "tree_learner": "data_parallel", "pre_partition": True, **get_network_params()}
    lightgbm.train(params, sets[0], num_boost_round=max(job["num_boost_round"] - done, 0),
                   valid_sets=sets, valid_names=job["splits"], init_model=booster,
                   callbacks=[RayTrainReportCallback(frequency=1)])


def _objective(params: Mapping[str, Any]) -> str:
    return str(params.get("objective", "regression"))


def default_metric(config: JobConfig) -> tuple[str, str]:
    """The first metric `params.metric` names, else the objective's default (binary_logloss,
    multi_logloss, l2), on the valid split."""
    params = config.get("params") or {}
    named = params.get("metric")
    first = (named[0] if named else None) if isinstance(named, list) else named
    metric = str(first or METRIC_OF.get(_objective(params), "l2"))
    return f"{valid_split(config)}-{metric}", "max" if metric in HIGHER_IS_BETTER else "min"


def class_names(config: JobConfig) -> list[Any] | None:
    params = config.get("params") or {}
    objective = _objective(params)
    if objective == "binary":
        return [0, 1]
    if objective in MULTICLASS:
        return list(range(int(params.get("num_class", 2))))
    return None


def load(checkpoint: str, card: dict[str, Any], use_gpu: bool) -> Scores:
    from ray.train import Checkpoint
    from ray.train.lightgbm import RayTrainReportCallback

    booster = RayTrainReportCallback.get_model(Checkpoint(checkpoint))
    return functools.partial(_scores, booster, card)


def _scores(booster: Any, card: dict[str, Any], batch: Any) -> Any:
    """Binary: P(1) per row, as (n, 2); multiclass: (n, classes) probabilities; else values."""
    import numpy as np

    x = np.column_stack([np.asarray(batch[c], dtype=np.float64) for c in card["features"]])
    raw = booster.predict(x)
    if card.get("class_names") is not None and raw.ndim == 1:
        return np.column_stack([1.0 - raw, raw])
    return raw
