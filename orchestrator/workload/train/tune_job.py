"""`tune:` a Ray Tune sweep the Train V2 way: a function trainable that builds the trainer for
its trial's config and fits it, with `TuneReportCallback` passing the metrics to Tune.

`param_space` mirrors the resolved config (e.g. `{train_loop_config: {lr: {grid_search: [..]}}}`
or `{params: {max_depth: {randint: [1, 9]}}}`); each trial's values are merged over the config.
Each trial's trainer runs under `<storage>/<name>/train-<trial id>`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from ...contract import DOMAINS, LIST_DOMAINS, JobConfig, TuneSection
from .. import results


def search_space(value: Any) -> Any:
    from ray import tune

    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)) in DOMAINS:
            kind, args = next(iter(value.items()))
            domain = getattr(tune, kind)
            return domain(args) if kind in LIST_DOMAINS else domain(*args)
        return {k: search_space(v) for k, v in value.items()}
    return value


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        nested = isinstance(value, dict) and isinstance(base.get(key), dict)
        merged[key] = merge(base[key], value) if nested else value
    return merged


def _defaults(config: JobConfig) -> dict[str, str]:
    if config.get("trainer") == "xgboost":
        split = "valid" if "valid" in (config.get("datasets") or {}) else "train"
        return {"metric": f"{split}-logloss", "mode": "min"}
    return {"metric": "loss", "mode": "min"}


def _concurrency(config: JobConfig) -> int:
    import ray

    scaling = config["scaling_config"]
    per_worker = (scaling.get("resources_per_worker") or {}).get("CPU", 1)
    need = scaling.get("num_workers", 1) * per_worker + 1  # + Ray Data's tasks
    # ray.cluster_resources has no annotations: an untyped call
    return max(1, int(ray.cluster_resources().get("CPU", 1) // need))  # type: ignore[no-untyped-call]


def run_tune(config: JobConfig) -> dict[str, Any]:
    import ray
    from ray import tune
    from ray.tune.integration.ray_train import TuneReportCallback

    from .configs import best_from_history, checkpoint_section, run_config, run_name

    name, storage = run_name(config), results.storage_root(config)
    experiment_uri = results.join(storage, name)
    make_trainer = _trainer_factory(config)

    def trainable(trial_config: dict[str, Any]) -> None:
        merged = cast(JobConfig, merge(config, trial_config))  # the trial's values over the config
        trial_name = f"train-{tune.get_context().get_trial_id()}"
        trial_uri = results.join(experiment_uri, trial_name)
        callbacks = [TuneReportCallback(),  # type: ignore[no-untyped-call]  # ray: no annotations
                     results.make_history_callback(trial_uri)]
        rc = run_config({**merged, "run_config": {**(merged.get("run_config") or {}),
                                                  "storage_path": experiment_uri}},
                        trial_name, callbacks)
        make_trainer(merged, rc, trial_uri).fit()

    ray.init(ignore_reinit_error=True)
    section = cast(TuneSection, config["tune"])  # train() runs a sweep only when there is one
    tune_config = dict(_defaults(config), **(section.get("tune_config") or {}))
    tune_config.setdefault("max_concurrent_trials", _concurrency(config))
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 0.01}),  # it only waits on the trainer
        param_space=search_space(section.get("param_space") or {}),
        tune_config=tune.TuneConfig(**tune_config),
        run_config=tune.RunConfig(name=name, storage_path=storage),
    )
    grid = tuner.fit()
    if grid.num_errors == len(grid):
        raise RuntimeError(f"every trial failed; the first: {grid.errors[0]}")
    best = grid.get_best_result()
    best_metrics = cast(dict[str, Any], best.metrics)  # the best result was picked by its metrics
    trials = [{"trial_id": r.metrics.get("trial_id"), "config": r.config,
               tune_config["metric"]: r.metrics.get(tune_config["metric"]),
               "error": str(r.error) if r.error else None}
              for r in grid]  # type: ignore[attr-defined]  # ResultGrid iterates through __getitem__
    history = results.read_history(results.join(experiment_uri, f"train-{best_metrics['trial_id']}"))
    summary = {"name": name, "status": "SUCCEEDED", "metric": tune_config["metric"],
               "metrics": {k: v for k, v in best_metrics.items() if k in (history[-1] if history else {})},
               "best_config": best.config, "trials": trials,
               "best_checkpoint": best_from_history(history, checkpoint_section(config))}
    return results.finish(experiment_uri, summary, history)


def _trainer_factory(config: JobConfig) -> Callable[[JobConfig, Any, str], Any]:
    if config.get("trainer") == "xgboost":
        from .xgboost_job import make_trainer
    else:
        from .torch_loop import make_trainer
    return make_trainer
