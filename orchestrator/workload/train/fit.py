"""One training run: the config's trainer built (`build`, also each Tune trial's), fitted, and
its results left beside it (`results.finish`)."""
from __future__ import annotations

from typing import Any

from ...contract import JobConfig
from .. import card, results, storage, timing, tracking, trainers
from ..configs import best_from_history, checkpoint_section, config_with_run, run_config, run_name


def build(config: JobConfig, ray_run_config: Any, run_uri: str) -> Any:
    """The config's Ray trainer, ready to fit; its model card written to `run_uri` (a run of a
    user's own train loop has none)."""
    made = trainers.get(config["trainer"]).make_trainer(config, ray_run_config)
    if made.prepared is not None:
        card.save(run_uri, config, made.prepared)
    return made.trainer


def run_trainer(config: JobConfig) -> dict[str, Any]:
    import ray

    ray.init(ignore_reinit_error=True)   # as the first dataset would: timed apart
    timing.mark("connected")
    name = run_name(config)
    run_uri = storage.join(storage.storage_root(config), name)
    print(f"orchestrate: run {name!r}, storage {run_uri}", flush=True)
    tracked = tracking.start(config, name, run_uri)
    callback = results.make_history_callback(run_uri)
    trainer = build(config_with_run(config, tracked), run_config(config, name, [callback]), run_uri)
    timing.mark("data")
    with tracking.following(tracked, run_uri):
        timing.mark("fit")
        result = trainer.fit()
    timing.mark("fitted")
    history = storage.read_history(run_uri)
    last = {k: v for k, v in history[-1].items() if k != "checkpoint"} if history else {}
    summary = {"name": name, "status": "SUCCEEDED", "metrics": last or _plain(result.metrics),
               "best_checkpoint": best_from_history(history, checkpoint_section(config))}
    return results.finish(run_uri, summary, history, config=config, tracked=tracked)


def _plain(metrics: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (metrics or {}).items() if isinstance(v, (int, float, str, bool))}
