"""Turning a command's cluster argument (a name or a cluster YAML's path) into its record."""
from __future__ import annotations

from pathlib import Path

from ..errors import ClusterError
from ..state import ClusterRecord, State
from ..state.folder import is_valid_name


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


def only_cluster(state: State, verb: str) -> ClusterRecord:
    """The one recorded cluster, for a verb whose cluster argument may be left out."""
    records = state.store.list_clusters()
    if not records:
        raise ClusterError(f"no cluster is recorded; nothing to {verb}")
    if len(records) > 1:
        names = ", ".join(r.name for r in records)
        raise ClusterError(f"{len(records)} clusters are recorded ({names}); say which one",
                           hint=f"orchestrate {verb} NAME")
    return records[0]


def optional_cluster(argument: str | None, state: State) -> ClusterRecord | None:
    return cluster(argument, state) if argument else None
