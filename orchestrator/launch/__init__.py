"""Launch backends: how a cluster comes up, is reached and goes down (`base.LaunchBackend`).

    backend(cluster, state, progress) -> LaunchBackend     the one place a backend is built

`cluster` is a spec or a record: its provider's `LAUNCH` names the backend: `ray_up` (`ray up`/
`down` over SSH, `ssh -L` forwards, `ray attach`/`rsync`, `exec` over ssh) and `kuberay` (a
RayCluster through the Kubernetes API, port-forwards to the head pod).
"""
from __future__ import annotations

from typing import Protocol

from .. import providers
from ..state import State
from ..util.progress import Progress, silent
from .base import LaunchBackend
from .kuberay import KubeRay
from .ray_up import RayUp

__all__ = ["BACKENDS", "LaunchBackend", "backend"]

BACKENDS: dict[str, type[RayUp] | type[KubeRay]] = {RayUp.NAME: RayUp, KubeRay.NAME: KubeRay}


class Cluster(Protocol):
    """What a backend is chosen by: a ClusterSpec or a ClusterRecord."""

    @property
    def provider(self) -> str: ...


def backend(cluster: Cluster, state: State,
            progress: Progress = silent) -> LaunchBackend:
    """The launch backend of `cluster`'s provider, working in `state`, telling `progress`."""
    return BACKENDS[providers.get(cluster.provider).LAUNCH](state, progress)
