"""Turning a command's cluster argument (a name or a cluster YAML's path) into its record."""
from __future__ import annotations

from pathlib import Path

from ..errors import ClusterError
from ..state import ClusterRecord, State


def cluster(argument: str, state: State) -> ClusterRecord:
    """The record for a cluster name or the path of its YAML file."""
    from .target import recorded_cluster

    path = Path(argument).expanduser()
    file = path if path.is_file() else None
    try:  # a corrupted record is reported, not skipped
        return recorded_cluster(state, name=argument, file=file)
    except ClusterError:
        if file is None:
            raise
    from ..language.cluster import load_cluster  # a file moved since `up`: its name says which

    return recorded_cluster(state, name=load_cluster(file, here=False).name, asked=argument)


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


def named_or_only(argument: str | None, state: State, verb: str) -> ClusterRecord:
    """The cluster named (or whose YAML is given), else the only one recorded."""
    return cluster(argument, state) if argument else only_cluster(state, verb)
