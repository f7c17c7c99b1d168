"""Which Ray a command talks to: a recorded cluster (through `open_cluster`, with its token) or
the embedded local Ray."""
from __future__ import annotations

import contextlib
from typing import Iterator

from ..errors import JobError
from . import local, registry
from .submit import Jobs, Target


@contextlib.contextmanager
def cluster_jobs(cluster: str) -> Iterator[Jobs]:
    from ..cluster.access import open_cluster

    with open_cluster(cluster) as access:
        yield Jobs(Target(access.address, access.token, f"cluster {access.name or cluster}"))


def local_target(ray: local.LocalRay) -> Target:
    """The embedded local Ray, with its token."""
    return Target(ray.address, local.read_token())


@contextlib.contextmanager
def existing(cluster: str | None, job_id: str | None = None) -> Iterator[Jobs]:
    """For jobs/logs/stop: the given cluster, else the job's recorded one, else the local Ray."""
    if cluster is None and job_id:
        cluster = (registry.job(job_id) or {}).get("cluster")
    if cluster:
        with cluster_jobs(cluster) as jobs:
            yield jobs
        return
    ray = local.current()
    if ray is None:
        raise JobError("no local Ray is running (it stops when its last run ends)",
                       hint="name a cluster with --cluster NAME")
    yield Jobs(local_target(ray))
