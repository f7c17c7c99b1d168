"""Which Ray a job command talks to: a recorded cluster (through its Endpoint, with its token)
or the embedded local Ray."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .. import embedded
from ..endpoint import open_cluster
from ..errors import ClusterError, JobError
from ..state import ClusterRecord, State
from .client import JobsClient


def recorded_cluster(name: str, state: State) -> ClusterRecord:
    """The record of cluster `name`, or ClusterError listing the known ones."""
    record = state.store.read_cluster(name)
    if record is None:
        known = ", ".join(r.name for r in state.store.list_clusters()) or "none"
        raise ClusterError(f"no cluster {name!r} is recorded (known: {known})",
                           hint="start it with `orchestrate up CLUSTER.yaml`")
    return record


@contextlib.contextmanager
def jobs_on(cluster: ClusterRecord | None, state: State) -> Iterator[JobsClient]:
    """Jobs on `cluster`, or on the embedded local Ray when it is None (which must be up)."""
    if cluster is not None:
        with open_cluster(cluster, state) as endpoint:
            yield JobsClient(endpoint)
        return
    ray = embedded.current(state.secrets)
    if ray is None:
        raise JobError("no local Ray is running (it stops when its last run ends)",
                       hint="name a cluster with --cluster NAME")
    yield JobsClient(ray.endpoint(state.secrets))


def cluster_of_job(job_id: str, state: State) -> str | None:
    """The cluster this machine submitted `job_id` to (None: the local Ray, or unknown)."""
    return (state.store.job(job_id) or {}).get("cluster")
