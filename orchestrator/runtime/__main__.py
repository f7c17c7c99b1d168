"""The job's entrypoint: read the resolved config, train, leave results, exit 0 only on success."""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

from . import results
from .data import absolute_paths


def run_trainer(config: dict, make_trainer) -> dict:
    from .configs import best_from_history, run_config, run_name

    name = run_name(config)
    run_uri = results.join(results.storage_root(config), name)
    print(f"orchestrate: run {name!r}, storage {run_uri}", flush=True)
    callback = results.make_history_callback(run_uri)
    result = make_trainer(config, run_config(config, name, [callback])).fit()
    history = results.read_history(run_uri)
    last = {k: v for k, v in history[-1].items() if k != "checkpoint"} if history else {}
    summary = {"name": name, "status": "SUCCEEDED", "metrics": last or _plain(result.metrics),
               "best_checkpoint": best_from_history(history, config)}
    return results.finish(run_uri, summary, history)


def _plain(metrics: dict | None) -> dict:
    return {k: v for k, v in (metrics or {}).items() if isinstance(v, (int, float, str, bool))}


def main() -> int:
    started = time.monotonic()
    try:
        config = json.loads(os.environ["ORCHESTRATE_EXPERIMENT"])
        if config.get("version") != 1:
            raise ValueError(f"unsupported config version {config.get('version')!r}")
        config = absolute_paths(config)
        if config.get("tune"):
            from .tune_job import run_tune

            summary = run_tune(config)
        elif config.get("trainer") == "xgboost":
            from .xgboost_job import make_trainer

            summary = run_trainer(config, make_trainer)
        else:
            from .torch_loop import make_trainer

            summary = run_trainer(config, make_trainer)
    except Exception as exc:  # noqa: BLE001 - the job's log is where the traceback belongs
        traceback.print_exc()
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        print(results.RESULT_MARK + json.dumps({"status": "FAILED", "error": error}), flush=True)
        return 1
    print(f"orchestrate: done in {time.monotonic() - started:.1f} s "
          f"({summary.get('status')})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
