"""The job's entrypoint: read the contract, run the workload, leave results, exit 0 only on
success (a failure prints its traceback to the job's log and a FAILED result line)."""
from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Any, cast

from .. import contract


def main() -> int:
    from . import timing
    from .worker import forget_secrets, framework_environment, hide, load_secrets

    timing.mark("main")
    timing.process_started()
    started = time.monotonic()
    secrets: dict[str, str] = {}
    try:
        secrets = load_secrets()
        framework_environment()
        config = contract.decode(os.environ.get(contract.CONFIG_ENV))
        summary = run(config)
    except Exception as exc:  # noqa: BLE001 - the job's log is where the traceback belongs
        print(hide(traceback.format_exc(), secrets), end="", file=sys.stderr, flush=True)
        from .tracking import fail_open_runs

        fail_open_runs()   # an MLflow run this job started ends FAILED, not RUNNING for ever
        error = hide(f"{type(exc).__name__}: {exc}", secrets).splitlines()[0][:500]
        if isinstance(exc, ModuleNotFoundError):   # name the interpreter that lacks it
            error += f" (in {sys.executable}, the Python the job runs under)"
        print(contract.result_line({"status": "FAILED", "error": error}), flush=True)
        return 1
    finally:
        forget_secrets()
    print(f"orchestrate: done in {time.monotonic() - started:.1f} s "
          f"({summary.get('status')})", flush=True)
    return 0


def run(config: dict[str, Any]) -> dict[str, Any]:
    """The configuration's workload (`contract.WORKLOADS`; decode has refused any other)."""
    if config["workload"] == "train":
        from .train import train

        return train(cast(contract.JobConfig, config))
    if config["workload"] == "predict":
        from .predict import predict

        return predict(cast(contract.PredictConfig, config))
    raise contract.ContractError(f"no workload {config['workload']!r} in this orchestrate")


if __name__ == "__main__":
    sys.exit(main())
