"""`tune:` a Ray Tune sweep the Train V2 way: a function trainable that builds the trainer for
its trial's config and fits it, with `TuneReportCallback` passing the metrics to Tune.

`param_space` mirrors the resolved config (e.g. `{train_loop_config: {lr: {grid_search: [..]}}}`
or `{params: {max_depth: {randint: [1, 9]}}}`); each trial's values are merged over the config.
Each trial's trainer runs under `<storage>/<name>/train-<trial id>`.
"""
from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, cast

from ...contract import DOMAINS, LIST_DOMAINS, TRIALS_ENV, JobConfig, TuneSection, trial_line
from ...util.text import differing, flatten
from .. import results, storage, tracking, trainers
from ..configs import best_from_history, checkpoint_section, config_with_run, run_config, run_name
from .fit import build


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
    """The trainer's own metric and mode, when `tune_config` names none."""
    metric, mode = trainers.get(config["trainer"]).default_metric(config)
    return {"metric": metric, "mode": mode}


def _concurrency(config: JobConfig) -> int:
    """Trials at once: as many as the run reserved in Ray's queue (`run.needs`), else as fit
    in the Ray's CPUs."""
    import os

    import ray

    reserved = os.environ.get(TRIALS_ENV, "")
    if reserved.isdigit() and int(reserved) > 0:
        return int(reserved)

    scaling = config["scaling_config"]
    per_worker = (scaling.get("resources_per_worker") or {}).get("CPU", 1)
    need = scaling.get("num_workers", 1) * per_worker + 1  # + Ray Data's tasks
    # ray.cluster_resources has no annotations: an untyped call
    return max(1, int(ray.cluster_resources().get("CPU", 1) // need))  # type: ignore[no-untyped-call]


def run_tune(config: JobConfig) -> dict[str, Any]:
    import ray
    from ray import tune
    from ray.tune.integration.ray_train import TuneReportCallback

    name, root = run_name(config), storage.storage_root(config)
    experiment_uri = storage.join(root, name)
    section = cast(TuneSection, config["tune"])  # train() runs a sweep only when there is one
    tune_config = dict(_defaults(config), **(section.get("tune_config") or {}))
    parent = tracking.start(config, name, experiment_uri, extra_params={
        f"tune.{k}": v for k, v in tune_config.items() if k in ("metric", "mode", "num_samples")})

    def trainable(trial_config: dict[str, Any]) -> None:
        merged = cast(JobConfig, merge(config, trial_config))  # the trial's values over the config
        trial_id = tune.get_context().get_trial_id()
        trial_name = f"train-{trial_id}"
        trial_uri = storage.join(experiment_uri, trial_name)
        child = tracking.start(merged, trial_name, trial_uri, parent=parent) if parent else None
        callbacks = [TuneReportCallback(),  # type: ignore[no-untyped-call]  # ray: no annotations
                     results.make_history_callback(trial_uri, trial=trial_id)]
        rc = run_config({**merged, "run_config": {**(merged.get("run_config") or {}),
                                                  "storage_path": experiment_uri}},
                        trial_name, callbacks)
        try:
            trainer = build(config_with_run(merged, child), rc, trial_uri)
            with tracking.following(child, trial_uri):
                trainer.fit()
        except BaseException:
            if child is not None:
                with contextlib.suppress(Exception):   # the trial's own error is the one to show
                    tracking.end(child, "FAILED")
            raise
        if child is not None:
            tracking.end(child, "FINISHED")

    ray.init(ignore_reinit_error=True)
    tune_config.setdefault("max_concurrent_trials", _concurrency(config))
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 0.01}),  # it only waits on the trainer
        param_space=search_space(section.get("param_space") or {}),
        tune_config=tune.TuneConfig(**tune_config),
        run_config=tune.RunConfig(name=name, storage_path=root, callbacks=[_trial_states()]),
    )
    grid = tuner.fit()
    if grid.num_errors == len(grid):
        raise RuntimeError(f"every trial failed; the first: {grid.errors[0]}")
    best = grid.get_best_result()
    best_metrics = cast(dict[str, Any], best.metrics)  # the best result was picked by its metrics
    metric = tune_config["metric"]
    histories = {str(r.metrics["trial_id"]): storage.read_history(
        storage.join(experiment_uri, f"train-{r.metrics['trial_id']}"))
        for r in grid if r.metrics and r.metrics.get("trial_id")}  # type: ignore[attr-defined]
    varying = differing([flatten(r.config) for r in grid])  # type: ignore[attr-defined]
    trials = [{"trial_id": r.metrics.get("trial_id"), "config": r.config,
               "params": {k: v for k, v in flatten(r.config).items() if k in varying},
               metric: r.metrics.get(metric),
               "epochs": len(histories.get(str(r.metrics.get("trial_id")), [])),
               "error": str(r.error) if r.error else None}
              for r in grid]  # type: ignore[attr-defined]
    history = histories.get(str(best_metrics["trial_id"]), [])
    summary = {"name": name, "status": "SUCCEEDED", "metric": metric,
               "mode": tune_config["mode"],
               "metrics": {k: v for k, v in best_metrics.items() if k in (history[-1] if history else {})},
               "best_config": best.config, "trials": trials,
               "best_checkpoint": best_from_history(history, checkpoint_section(config))}
    curves: dict[str, list[dict[str, Any]]] = {}
    for trial in trials:
        if str(trial["trial_id"]) in histories:   # a trial that failed before reporting has none
            curves[results.curve_label(str(trial["trial_id"]), trial["params"])] = \
                histories[str(trial["trial_id"])]
    png = results.overlay(curves, f"{name}: {len(trials)} trials")
    return results.finish(experiment_uri, summary, history, config=config, png=png,
                          tracked=parent)


def _trial_states() -> Any:
    """A Tune callback printing each trial's state when it changes (`contract.trial_line`)."""
    from ray.tune import Callback

    class TrialStates(Callback):
        def __init__(self) -> None:
            self.seen: dict[str, str] = {}

        def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
            for trial in trials:
                if self.seen.get(trial.trial_id) != trial.status:
                    self.seen[trial.trial_id] = trial.status
                    print(trial_line({"trial": trial.trial_id, "state": trial.status,
                                      "config": flatten(trial.config)}), flush=True)

        def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
            self.on_step_end(0, trials)

    return TrialStates()
