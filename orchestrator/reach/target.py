"""Which Ray a command reaches, decided in one place: a recorded cluster, the one a job went
to, or the embedded Ray; with one set of messages.

    with open_target(state, record) as endpoint: ...              # a cluster, else the embedded Ray (up)
    with open_target(state, job=job_id) as endpoint: ...          # where this machine sent the job
    with open_target(state, start=True, keep=..., progress=...)   # the embedded Ray, started if need be
    with open_target(state, record, loopback=True, local_port=...)  # for a browser: on 127.0.0.1

`embedded_endpoint(state)`: the embedded Ray's Endpoint if it is up, else None (no error).
"""
from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from ..errors import ClusterError, JobError
from ..state import ClusterRecord, State
from ..state.folder import is_valid_name
from ..util.progress import Progress, silent
from . import embedded
from .endpoint import Endpoint, open_cluster, open_dashboard

NOT_RUNNING = ("the embedded Ray is not running (it stops once idle for "
               "ORCHESTRATE_EMBEDDED_RAY_IDLE, default 10m; at 0, when its last run ends)")
NOT_RUNNING_HINT = ("name a cluster (`orchestrate up CLUSTER.yaml` starts one); `run`, "
                    "`predict` and `serve` start the embedded Ray")


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


def cluster_of_job(job_id: str, state: State) -> ClusterRecord | None:
    """The cluster this machine submitted `job_id` to (None: the embedded Ray, or unknown)."""
    name = (state.store.job(job_id) or {}).get("cluster")
    return recorded_cluster(state, name=name) if name else None


def embedded_endpoint(state: State) -> Endpoint | None:
    """The embedded Ray's Endpoint if it is up (answering with our token), else None."""
    ray = embedded.current(state.secrets)
    return ray.endpoint(state.secrets) if ray is not None else None


@contextlib.contextmanager
def open_target(state: State, cluster: ClusterRecord | None = None, *, job: str | None = None,
                start: bool = False, keep: bool = False, num_cpus: int | None = None,
                profiling: bool = False, progress: Progress = silent, loopback: bool = False,
                local_port: int | None = None,
                watch: list[subprocess.Popen[str]] | None = None,
                timeout: float = 20) -> Iterator[Endpoint]:
    """The Endpoint of `cluster`; else, given `job`, of the cluster this machine sent it to;
    else of the embedded Ray: started (with `num_cpus`, and profiling on if `profiling`) if
    `start` and it is not up, kept up after the block if `keep`; JobError if it is not up and
    not to be started.

    `loopback`: a cluster's dashboard on this machine's 127.0.0.1 (`local_port`, else a free
    one) even when its jobs need no forward, for a browser's cookie; `watch` gets the forward's
    ssh process."""
    if cluster is None and job is not None:
        cluster = cluster_of_job(job, state)
    if cluster is not None:
        opened = (open_dashboard(cluster, state, local_port=local_port, timeout=timeout,
                                 watch=watch) if loopback
                  else open_cluster(cluster, state, timeout=timeout))
        with opened as endpoint:
            yield endpoint
        return
    if start:
        with embedded.session(state.secrets, num_cpus=num_cpus, keep=keep,
                              progress=progress, profiling=profiling) as (ray, started):
            progress(f"{'started' if started else 'using'} the embedded Ray ({ray.address})")
            yield ray.endpoint(state.secrets)
        return
    up = embedded_endpoint(state)
    if up is None:
        raise JobError(NOT_RUNNING, hint=NOT_RUNNING_HINT)
    yield up
