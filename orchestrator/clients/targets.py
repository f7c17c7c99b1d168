"""The jobs client on the Ray a job command reaches (`reach.target.open_target` decides which:
a recorded cluster, the one a job went to, or the embedded Ray); and where an embedded Ray's
job is once that Ray is gone (`archived`)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..errors import OrchestrateError
from ..reach import archive
from ..reach.target import open_target
from ..state import ClusterRecord, State
from .jobs import JobsClient


@contextlib.contextmanager
def jobs_on(cluster: ClusterRecord | None, state: State) -> Iterator[JobsClient]:
    """Jobs on `cluster`, or on the embedded Ray when it is None (which must be up)."""
    with open_target(state, cluster) as endpoint:
        yield JobsClient(endpoint)


@contextlib.contextmanager
def jobs_of(job_id: str, cluster: ClusterRecord | None, state: State) -> Iterator[JobsClient]:
    """For logs/stop: the given cluster, else the one this machine submitted the job to, else
    the embedded Ray."""
    with open_target(state, cluster, job=job_id) as endpoint:
        yield JobsClient(endpoint)


# Ray starts a job's clock when it accepts it, and this machine records the job right after: a
# kept job that started long before the record is an earlier job of the same id
SUBMIT_SLACK = 120.0


def archived(job_id: str, state: State, cluster: str | None = None) -> archive.Archived | None:
    """Job `job_id` as kept once its Ray was gone, if it is the job this machine sent there
    under that id (an unchanged experiment run again on a later Ray reuses the id): a cluster's
    job (the cluster this machine sent it to, or `cluster`) in that cluster's archives
    (`cluster.archive`, newest first), an embedded Ray's as kept when it stopped
    (`reach.archive`); None otherwise. ClusterError when a cluster's archive cannot be read
    (`cluster.archive.find_job`)."""
    record = state.store.job(job_id) or {}
    name = cluster or record.get("cluster")
    if name:
        from ..cluster.archive import find_job

        try:
            config = state.store.read_rendered(str(name))
        except OrchestrateError:
            config = None
        kept = find_job(str(name), job_id, config, state)
    else:
        kept = archive.read(job_id)
    submitted = record.get("submitted_at")
    if kept is None or (isinstance(submitted, (int, float)) and kept.start_time is not None
                        and kept.start_time / 1000 < submitted - SUBMIT_SLACK):
        return None
    return kept
