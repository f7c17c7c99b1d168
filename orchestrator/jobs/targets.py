"""Which Ray a job command talks to: a recorded cluster (through its Endpoint, with its token)
or the embedded local Ray."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from ..errors import ClusterError, JobError
from ..reach import embedded
from ..reach.endpoint import open_cluster
from ..state import ClusterRecord, State
from ..state.folder import is_valid_name
from .client import JobsClient


def recorded_cluster(state: State, *, name: str | None = None, file: Path | None = None,
                     asked: str | None = None) -> ClusterRecord:
    """The record of cluster `name`, else of the one launched from `file` (its name may have
    changed since), else ClusterError listing the known ones (naming `asked`, or `name`)."""
    record = state.store.read_cluster(name) if name and is_valid_name(name) else None
    if record is None and file is not None:
        absolute = str(file.resolve())
        record = next((r for r in state.store.list_clusters() if r.file == absolute), None)
    if record is None:
        known = ", ".join(r.name for r in state.store.list_clusters()) or "none"
        raise ClusterError(f"no cluster {asked or name!r} is recorded (known: {known})",
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


@contextlib.contextmanager
def jobs_of(job_id: str, cluster: ClusterRecord | None, state: State) -> Iterator[JobsClient]:
    """For logs/stop: the given cluster, else the one this machine submitted the job to, else
    the local Ray."""
    if cluster is None:
        name = (state.store.job(job_id) or {}).get("cluster")
        cluster = recorded_cluster(state, name=name) if name else None
    with jobs_on(cluster, state) as jobs:
        yield jobs
