"""When the job reached each step, for the run's phase breakdown (`run.phases`): wall-clock
marks in the driver, sent in the result line as `timing`.

    main       the driver's `main()` began (its interpreter and orchestrate imported)
    process    the driver's process was created (psutil: before Python's start-up)
    connected  the driver joined the Ray cluster (Ray imported, connected)
    data       the datasets are read, preprocessors fitted, caches filled; the trainer built
    fit        Ray Train's `fit()` called (its controller, then the worker group, start)
    fitted     `fit()` returned (workers stopped)

Each epoch's line carries the time its report reached the controller (`REPORTED`), so the
client can tell the worker group's start from the epochs from the shutdown.
"""
from __future__ import annotations

import time

REPORTED = "_reported_at"   # in an epoch line: not a metric (no history, CSV or MLflow)
_marks: dict[str, float] = {}


def mark(name: str) -> None:
    _marks.setdefault(name, time.time())


def process_started() -> None:
    try:
        import psutil  # Ray's own dependency

        _marks.setdefault("process", psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - a breakdown without it is still a breakdown
        pass


def marks() -> dict[str, float]:
    return dict(_marks)
