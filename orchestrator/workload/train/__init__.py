"""Training: a TorchTrainer (built-in model or the user's loop), an XGBoostTrainer, or a Tune
sweep over either, from the resolved configuration."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

from ...contract import JobConfig
from .. import results
from ..data import absolute_paths


def train(config: JobConfig) -> dict[str, Any]:
    config = absolute_paths(config)
    if config.get("tune"):
        from .tune_job import run_tune

        return run_tune(config)
    if config.get("trainer") == "xgboost":
        from .xgboost_job import make_trainer
    else:
        from .torch_loop import make_trainer
    return run_trainer(config, make_trainer)


def run_trainer(config: JobConfig,
                make_trainer: Callable[[JobConfig, Any, str], Any]) -> dict[str, Any]:
    from .. import tracking
    from .configs import best_from_history, checkpoint_section, run_config, run_name

    name = run_name(config)
    run_uri = results.join(results.storage_root(config), name)
    print(f"orchestrate: run {name!r}, storage {run_uri}", flush=True)
    tracked = tracking.start(config, name, run_uri)
    callback = results.make_history_callback(run_uri)
    trainer = make_trainer(config_with_run(config, tracked), run_config(config, name, [callback]),
                           run_uri)
    with tracking.following(tracked, run_uri):
        result = trainer.fit()
    history = results.read_history(run_uri)
    last = {k: v for k, v in history[-1].items() if k != "checkpoint"} if history else {}
    summary = {"name": name, "status": "SUCCEEDED", "metrics": last or _plain(result.metrics),
               "best_checkpoint": best_from_history(history, checkpoint_section(config))}
    return results.finish(run_uri, summary, history, config=config, tracked=tracked)


def config_with_run(config: JobConfig, tracked: Any) -> JobConfig:
    """The config a trainer is made from, naming the MLflow run (`tracking.Run`) a user's train
    loop logs to."""
    if tracked is None:
        return config
    return cast(JobConfig, dict(config, tracking=dict(config.get("tracking") or {},
                                                      run=dataclasses.asdict(tracked))))


def _plain(metrics: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (metrics or {}).items() if isinstance(v, (int, float, str, bool))}
