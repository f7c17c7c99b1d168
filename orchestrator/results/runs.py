"""The runs this machine submitted (`orchestrate runs`): its job records joined with the runs'
summaries, newest first. A job not seen to end (`run --detach`, Ctrl-C, `apply`) is asked about
where it runs, when that Ray answers; what it says is recorded, so the next listing is offline.
A job that its Ray cannot tell about (the embedded Ray stopped or restarted, a cluster gone)
takes its end from what was kept when that Ray went (`reach.archive`; a cluster's archive,
`cluster.archive`), recorded the same way.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import contract
from ..clients.jobs import TERMINAL
from ..errors import ClusterError, OrchestrateError
from ..state import State

EMBEDDED = "embedded"   # the cluster column of a run on the embedded Ray
OLD_EMBEDDED = "local"  # what that column said before 0.2.0, still taken by --cluster
UNKNOWN = "UNKNOWN"   # not seen to end, and its Ray does not answer about it now


def recorded(state: State, *, experiment: str | None = None,
             cluster: str | None = None) -> list[dict[str, Any]]:
    """Every recorded run (one per job), filtered by experiment (a file or a name) and cluster
    ("embedded": the embedded Ray; "local" still means it here, as before 0.2.0)."""
    rows = [_row(job, state) for job in state.store.jobs()]
    if experiment is not None:
        rows = [r for r in rows if _is_of(r, experiment)]
    if cluster is not None:
        wanted = EMBEDDED if cluster == OLD_EMBEDDED else cluster
        rows = [r for r in rows if r["cluster"] == wanted]
    return rows


def _row(job: dict[str, Any], state: State) -> dict[str, Any]:
    summary = state.store.run(job["job_id"]) or {}
    if summary.get("job_id") not in (None, job["job_id"]):
        summary = {}
    file = job.get("experiment") or ""
    return {"job_id": job["job_id"], "experiment": Path(file).stem if file else "",
            "experiment_file": file, "run": summary.get("name") or job.get("run") or job.get("name"),
            "cluster": job.get("cluster") or EMBEDDED,
            "status": job.get("status") or summary.get("status") or "SUBMITTED",
            "started": job.get("submitted_at"),
            "wall_time_s": job.get("wall_time_s") or summary.get("wall_time_s"),
            "metrics": summary.get("metrics") or {}, "storage": summary.get("run_path"),
            "run_folder": summary.get("run_path") or _run_folder(job),
            "error": job.get("error"), "needs": job.get("needs")}


def _run_folder(job: dict[str, Any]) -> str | None:
    """Where a run not ended yet keeps its files: `<storage_path>/<run name>`, as Ray Train
    names it (None: Ray's default storage, each node's ~/ray_results)."""
    storage, name = job.get("storage_path"), job.get("name")
    return f"{str(storage).rstrip('/')}/{name}" if storage and name else None


def _is_of(row: dict[str, Any], experiment: str) -> bool:
    path = Path(experiment)
    if path.is_file():
        return bool(row["experiment_file"]) and Path(row["experiment_file"]) == path.resolve()
    return experiment in (row["experiment"], row["run"])


def refresh(rows: list[dict[str, Any]], state: State,
            progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Ask Ray about the runs not seen to end (once per cluster; a Ray that does not answer
    leaves them as recorded, with a note); record what ended. A cluster's archives are read
    once for all its runs (`cluster.archive.one_look`); one that cannot be read is a warning,
    once, and its runs are not found there."""
    from ..cluster.archive import one_look

    waiting: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["status"] not in TERMINAL:
            waiting.setdefault(row["cluster"], []).append(row)
    warned: set[str] = set()

    def warn(message: str) -> None:
        if message not in warned:
            warned.add(message)
            progress(f"warning: {message}")

    with one_look():
        for cluster, pending in waiting.items():
            try:
                _ask(cluster, pending, state, warn)
            except OrchestrateError as exc:
                unknown = [row for row in pending if not from_archive(row, state, warn)]
                if unknown:
                    progress(f"note: {len(unknown)} run(s) on {cluster} not updated: "
                             f"{exc.message}")
                for row in unknown:
                    row["status"] = UNKNOWN
    return rows


def _ask(cluster: str, rows: list[dict[str, Any]], state: State,
         warn: Callable[[str], None]) -> None:
    from ..clients.targets import jobs_on
    from ..reach.target import recorded_cluster
    from ..run.experiment import outcome

    record = None if cluster == EMBEDDED else recorded_cluster(state, name=cluster)
    with jobs_on(record, state) as jobs:
        for row in rows:
            try:
                status = jobs.status(row["job_id"])
            except OrchestrateError as exc:   # this Ray does not know it (restarted since)
                if not from_archive(row, state, warn):
                    row.update(status=UNKNOWN, error=exc.message)
                continue
            row["status"] = status
            if status not in TERMINAL:
                continue
            fields: dict[str, Any] = {"status": status}
            try:
                summary = outcome(jobs, row["job_id"], status, cluster, lambda _: None)
            except OrchestrateError as exc:
                fields["error"] = row["error"] = exc.message
            else:
                state.store.record_run(row["job_id"], summary, row["job_id"])
                fields["run"] = row["run"] = summary.get("name")
                row.update(metrics=summary.get("metrics") or {}, storage=summary.get("run_path"))
            state.store.update_job(row["job_id"], fields)


def from_archive(row: dict[str, Any], state: State,
                 warn: Callable[[str], None] = lambda _: None) -> bool:
    """A run that its Ray cannot tell about (stopped, restarted, a cluster gone): its end as
    kept when that Ray went (`clients.targets.archived`), recorded as `_ask` records what Ray says;
    False if none was kept, or the archive cannot be read (why: to `warn`)."""
    from ..clients.targets import archived

    try:
        kept = archived(row["job_id"], state)
    except ClusterError as exc:
        warn(exc.message + (f" ({exc.hint})" if exc.hint else ""))
        return False
    if kept is None:
        return False
    summary = contract.parse_result(kept.log()) or {}
    summary.pop("timing", None)
    status, reason = kept.status, kept.reason()
    if reason is None and summary.get("status") != "SUCCEEDED":   # as `outcome` judges it
        status, reason = "FAILED", summary.get("error") or f"the job ended {kept.status}"
    fields: dict[str, Any] = {"status": status}
    if kept.end_time is not None:
        fields["ended_at"] = kept.end_time / 1000
    if reason is not None:
        verb = "stopped" if kept.stopped_with_ray else "failed"
        fields["error"] = f"job {row['job_id']} {verb}: {reason}"
    else:
        state.store.record_run(row["job_id"], summary, row["job_id"])
        fields["run"] = row["run"] = summary.get("name") or row["run"]
        row.update(metrics=summary.get("metrics") or {}, storage=summary.get("run_path"))
    row.update(status=status, error=fields.get("error"))
    state.store.update_job(row["job_id"], fields)
    return True

