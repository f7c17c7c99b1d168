"""Where a command reaches Ray: one `Endpoint` (address, token, how it was reached).

    with open_cluster(record, state) as endpoint:    # a recorded cluster
        JobsClient(endpoint) ...
    embedded.session() ... ray.endpoint()            # the embedded Ray

Which of them a command reaches is decided in `target.open_target`.

When the cluster's dashboard binds to the head's loopback (clouds), a forward to the head's
dashboard port (its launch backend's: for `ray up` clusters `ssh -N -L` to a Unix socket in a
0700 folder, behind a 127.0.0.1 port this process holds) is open for the duration of the block.
Clients send the token as `Authorization: Bearer <token>` (`headers`), never through a proxy,
never across a redirect, and to a loopback address only once its listener is proven ours
(`util.listeners`; the embedded Ray vouches for its dashboard's address).
"""
from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field

from .. import launch
from ..errors import ClusterError
from ..state import ClusterRecord, State, cluster_key
from ..util import http

DIRECT, FORWARD, EMBEDDED = "direct", "ssh-forward", "embedded"


@dataclass(frozen=True)
class Endpoint:
    address: str                         # http://host:port, usable from this machine now
    token: str | None = field(repr=False)
    label: str                           # for messages: "cluster gpu", "the embedded Ray"
    via: str = DIRECT                    # direct | ssh-forward | embedded

    @property
    def headers(self) -> dict[str, str]:
        return http.bearer(self.token)


@contextlib.contextmanager
def open_cluster(record: ClusterRecord, state: State, *, timeout: float = 20) -> Iterator[Endpoint]:
    """The cluster's dashboard for jobs: its address when it is reachable directly, else the
    forward `open_dashboard` opens."""
    if record.tunneled:
        with open_dashboard(record, state, local_port=None, timeout=timeout) as endpoint:
            yield endpoint
        return
    token = state.secrets.read(cluster_key(record.name))
    head = _head_ip(record)
    yield Endpoint(record.address or f"http://{head}:{record.dashboard_port}", token,
                   f"cluster {record.name}")


def _head_ip(record: ClusterRecord) -> str:
    if not record.head_ip:
        raise ClusterError(f"cluster {record.name!r} has no head address recorded "
                           f"(state: {record.state})", hint="run `orchestrate up` again")
    return record.head_ip


@contextlib.contextmanager
def open_dashboard(record: ClusterRecord, state: State, *, local_port: int | None,
                   timeout: float = 20,
                   watch: list[subprocess.Popen[str]] | None = None) -> Iterator[Endpoint]:
    """A cluster's dashboard on this machine's loopback, whether or not its jobs need a
    forward: a browser signs in with a cookie for 127.0.0.1 (orchestrator.reach.signin)."""
    token = state.secrets.read(cluster_key(record.name))
    _head_ip(record)
    host = record.dashboard_host
    remote_host = "127.0.0.1" if record.tunneled or host in ("0.0.0.0", "::") else host
    with launch.backend(record, state).forward(record, record.dashboard_port, timeout=timeout,
                                               local_port=local_port, remote_host=remote_host,
                                               watch=watch) as port:
        yield Endpoint(f"http://127.0.0.1:{port}", token, f"cluster {record.name}", FORWARD)
