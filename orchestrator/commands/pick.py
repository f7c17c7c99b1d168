"""Turning a command's cluster argument (a name or a cluster YAML's path) into its record."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ClusterError
from ..state import ClusterRecord, State
from ..state.folder import is_valid_name

if TYPE_CHECKING:
    from ..jobs.client import JobsClient


def cluster(argument: str, state: State) -> ClusterRecord:
    """The record for a cluster name or the path of its YAML file."""
    if is_valid_name(argument):  # a corrupted record is reported, not skipped
        record = state.store.read_cluster(argument)
        if record is not None:
            return record
    path = Path(argument).expanduser()
    if path.is_file():
        absolute = str(path.resolve())
        for record in state.store.list_clusters():
            if record.file == absolute:
                return record
        from ..language.cluster import load_cluster

        found = state.store.read_cluster(load_cluster(path).name)
        if found is not None:
            return found
    known = ", ".join(r.name for r in state.store.list_clusters()) or "none"
    raise ClusterError(f"no cluster {argument!r} is recorded (known: {known})",
                       hint="start it with `orchestrate up CLUSTER.yaml`")


def only_cluster(state: State) -> ClusterRecord:
    """The one recorded cluster, for commands whose cluster argument is optional."""
    records = state.store.list_clusters()
    if not records:
        raise ClusterError("no cluster is recorded; nothing to tear down")
    if len(records) > 1:
        names = ", ".join(r.name for r in records)
        raise ClusterError(f"{len(records)} clusters are recorded ({names}); say which one",
                           hint="orchestrate down NAME")
    return records[0]


@contextlib.contextmanager
def jobs_of(job_id: str, cluster: str | None, state: State) -> Iterator[JobsClient]:
    """For logs/stop: the given cluster, else where this machine submitted the job, else the
    local Ray."""
    from ..jobs.targets import cluster_of_job, jobs_on

    name = cluster or cluster_of_job(job_id, state)
    with jobs_on(pick_or_none(name, state), state) as jobs:
        yield jobs


def pick_or_none(argument: str | None, state: State) -> ClusterRecord | None:
    return cluster(argument, state) if argument else None
