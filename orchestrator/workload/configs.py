"""Ray Train's ScalingConfig / DataConfig / RunConfig from the resolved configuration, and the
run's folder.

Ray Train V2 restores a run from `<storage_path>/<name>` whenever that folder holds a previous
run's state. So `resume: true` uses the name as given (continuing from its latest checkpoint),
while `resume: false` on a name already used starts a new run under `<name>-<timestamp>`
rather than silently continuing (or overwriting) the old one.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, cast

from ..contract import JobConfig
from . import storage


def run_name(config: JobConfig) -> str:
    name = (config.get("run_config") or {}).get("name") or config["name"]
    if config.get("resume"):
        return name
    if storage.exists(storage.join(storage.storage_root(config), name)):
        return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    return name


def scaling_config(config: JobConfig) -> Any:
    from ray.train import ScalingConfig

    scaling = config["scaling_config"]
    return ScalingConfig(num_workers=scaling["num_workers"], use_gpu=scaling["use_gpu"],
                         resources_per_worker=scaling["resources_per_worker"],
                         placement_strategy=scaling.get("placement_strategy", "PACK"))


def data_config(config: JobConfig) -> Any:
    """Ray Train's DataConfig: its default (every dataset split across the workers) unless the
    run has one worker. Ray's default splits even then: an actor per dataset (a
    SplitCoordinator, about 2 CPU-s to start) to hand all of it to that worker. One worker
    reads its datasets itself instead (`ds.iterator()` in Ray's DataConfig)."""
    from ray.train import DataConfig

    if config["scaling_config"]["num_workers"] == 1:
        return DataConfig(datasets_to_split=[])
    return DataConfig()


def run_config(config: JobConfig, name: str, callbacks: list[Any]) -> Any:
    from ray.train import CheckpointConfig, FailureConfig, RunConfig

    section = config.get("run_config") or {}
    checkpoint = section.get("checkpoint_config")
    failure = section.get("failure_config")
    return RunConfig(
        name=name,
        storage_path=storage.storage_root(config),
        checkpoint_config=CheckpointConfig(**checkpoint) if checkpoint else None,
        failure_config=FailureConfig(**failure) if failure else None,
        callbacks=callbacks,
    )


def checkpoint_section(config: JobConfig) -> dict[str, Any]:
    return (config.get("run_config") or {}).get("checkpoint_config") or {}


def best_from_history(history: list[dict[str, Any]], section: dict[str, Any]) -> str | None:
    """The best kept checkpoint by the score of `section` (the run's checkpoint_config; ties:
    the later one, as Ray keeps it), else the latest."""
    rows = [r for r in history if r.get("checkpoint") and storage.exists(r["checkpoint"])]
    metric = section.get("checkpoint_score_attribute")
    scored = [(r[metric], i, r) for i, r in enumerate(rows)
              if metric and isinstance(r.get(metric), (int, float))]
    if scored:
        sign = 1 if section.get("checkpoint_score_order", "max") == "max" else -1
        return cast(str, max(scored, key=lambda t: (sign * t[0], t[1]))[2]["checkpoint"])
    return rows[-1]["checkpoint"] if rows else None


def config_with_run(config: JobConfig, tracked: Any) -> JobConfig:
    """The config a trainer is made from, naming the MLflow run (`tracking.Run`) a user's train
    loop logs to."""
    if tracked is None:
        return config
    return cast(JobConfig, dict(config, tracking=dict(config.get("tracking") or {},
                                                      run=dataclasses.asdict(tracked))))
