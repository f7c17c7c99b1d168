"""Launch backends: how a cluster comes up, is reached and goes down (`base.LaunchBackend`),
each in a folder of its own.

    backend(cluster, state, progress) -> LaunchBackend     the one place a backend is built
    backend_type(provider) -> the backend's class           what it is, without building it
    features(provider) -> frozenset[Feature]                what it can do (base.Feature)
    jobs_on_own_cluster(cluster, state, progress)           the backend as it runs a job on a
                                                            cluster of its own (a RayJob)

A provider's `LAUNCH` names its backend: `ray-up` (ray_up/: `ray up`/`down` over SSH, `ssh -L`
forwards, `ray attach`/`rsync`, `exec` over ssh) and `kuberay` (kuberay/: a RayCluster through
the Kubernetes API, port-forwards to the head pod; its RayJobs and RayServices, and KubeRay's
CRD checks). Adding a backend is a folder and a line in BACKENDS (docs/design.md).
"""
from __future__ import annotations

from typing import Protocol

from .. import providers
from ..state import State
from ..util.progress import Progress, silent
from .base import Feature, JobsOnOwnCluster, LaunchBackend
from .kuberay.backend import KubeRay
from .ray_up.backend import RayUp

__all__ = ["BACKENDS", "Feature", "JobsOnOwnCluster", "KubeRay", "LaunchBackend", "RayUp", "backend",
           "backend_type", "features", "jobs_on_own_cluster"]

BACKENDS: dict[str, type[RayUp] | type[KubeRay]] = {RayUp.NAME: RayUp, KubeRay.NAME: KubeRay}


class Cluster(Protocol):
    """What a backend is chosen by: a ClusterSpec or a ClusterRecord."""

    @property
    def provider(self) -> str: ...


def backend_type(provider: str) -> type[RayUp] | type[KubeRay]:
    """The launch backend of clusters of `provider` (a provider's type, as in the file)."""
    return BACKENDS[providers.get(provider).LAUNCH]


def features(provider: str) -> frozenset[Feature]:
    """What the launch backend of clusters of `provider` can do; none for a provider
    orchestrate does not know (state is data: a record may name anything)."""
    if provider not in providers.PROVIDERS:
        return frozenset()
    return backend_type(provider).FEATURES


def backend(cluster: Cluster, state: State,
            progress: Progress = silent) -> LaunchBackend:
    """The launch backend of `cluster`'s provider, working in `state`, telling `progress`."""
    return backend_type(cluster.provider)(state, progress)


def jobs_on_own_cluster(cluster: Cluster, state: State,
                        progress: Progress = silent) -> JobsOnOwnCluster:
    """The launch backend of `cluster`'s provider, as it runs a job on a cluster of its own
    (`Feature.JOB_ON_OWN_CLUSTER`); ClusterError for a backend that cannot."""
    from typing import cast

    from ..errors import ClusterError

    found = backend(cluster, state, progress)
    if Feature.JOB_ON_OWN_CLUSTER not in found.FEATURES:
        raise ClusterError(f"{cluster.provider} clusters cannot run a job on a cluster of its own",
                           hint="`own_cluster` needs a KubeRay cluster file")
    return cast(JobsOnOwnCluster, found)

