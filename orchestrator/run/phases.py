"""Where a run's time went, from the marks its driver sent (`workload.timing`), the times its
epochs' reports reached Ray Train's controller (in the epoch lines), the job's start in Ray's
job table, and this command's own clock. Each phase is a difference of two times taken by the
same machine's clock; what is left of the wall time is `end`.

    submit        this command: read and check the files, ship, start or reuse the Ray, upload
    job start     Ray: the runtime_env set up, the driver's process started
    driver        the driver: Python, Ray and orchestrate imported, connected to Ray
    data          read the datasets, fit the preprocessors, fill the caches, build the trainer
    workers       Ray Train: the controller and worker group started, up to the first report
    epochs        from the first epoch's report to the last's
    shutdown      Ray Train: from the last report until `fit()` returned
    results       history, plot, summary (and MLflow) written
    end           the job's end noticed here and its results read (and anything unaccounted)
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import contract

# phase -> (from, to): marks of the driver (`workload.timing`), `first`/`last` report, `job`
SPANS = (("job start", "job", "process"), ("driver", "process", "connected"),
         ("data", "connected", "data"), ("workers", "fit", "first"),
         ("epochs", "first", "last"), ("shutdown", "last", "fitted"),
         ("results", "fitted", "results"))


def reports(log: str) -> list[float]:
    """When each epoch's report reached the controller, from the job's log."""
    from ..workload.timing import REPORTED

    times = []
    for line in log.splitlines():
        row = contract.parse_epoch(line)
        if row is not None and isinstance(row.get(REPORTED), (int, float)):
            times.append(float(row[REPORTED]))
    return times


def breakdown(timing: Mapping[str, Any] | None, log: str, job_start: float | None,
              submit: float, wall: float) -> dict[str, float]:
    """Seconds per phase (0.1 s), in order; a phase whose marks are missing is left out (a
    Tune sweep's driver marks less), its time then counted in `end`."""
    times = {k: float(v) for k, v in (timing or {}).items() if isinstance(v, (int, float))}
    if "process" not in times and "main" in times:
        times["process"] = times["main"]
    if job_start is not None:
        times["job"] = job_start
    reported = reports(log) if "fit" in times else []   # a sweep's trials overlap
    if reported:
        times["first"], times["last"] = reported[0], reported[-1]
    phases = {"submit": max(submit, 0.0)}
    for name, start, stop in SPANS:
        if start in times and stop in times:
            phases[name] = max(times[stop] - times[start], 0.0)
    phases["end"] = max(wall - sum(phases.values()), 0.0)
    return {name: round(seconds, 1) for name, seconds in phases.items()}


def text(phases: Mapping[str, float]) -> str:
    return ", ".join(f"{name} {seconds:g}" for name, seconds in phases.items())
