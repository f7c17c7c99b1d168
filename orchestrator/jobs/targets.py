"""The jobs client on the Ray a job command reaches (`reach.target.open_target` decides which:
a recorded cluster, the one a job went to, or the embedded Ray)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..reach.target import open_target
from ..state import ClusterRecord, State
from .client import JobsClient


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
