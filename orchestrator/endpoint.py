"""Where a command reaches Ray: one `Endpoint` (address, token, how it was reached).

    with open_cluster(record, state) as endpoint:    # a recorded cluster
        JobsClient(endpoint) ...
    embedded.session() ... ray.endpoint()            # the embedded local Ray

When the cluster's dashboard binds to the head's loopback (clouds), an `ssh -N -L` forward from
a free local port to the head's dashboard port is open for the duration of the block. Clients
send the token as `Authorization: Bearer <token>` (`headers`).
"""
from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ClusterError
from .state import ClusterRecord, State, cluster_key
from .util import http, ssh
from .util.ports import free_port
from .util.processes import stop_child_group
from .util.waiting import poll

DIRECT, FORWARD, EMBEDDED = "direct", "ssh-forward", "embedded"


@dataclass(frozen=True)
class Endpoint:
    address: str                         # http://host:port, usable from this machine now
    token: str | None = field(repr=False)
    label: str                           # for messages: "cluster gpu", "the local Ray"
    via: str = DIRECT                    # direct | ssh-forward | embedded

    @property
    def headers(self) -> dict[str, str]:
        return http.bearer(self.token)


@contextlib.contextmanager
def open_cluster(record: ClusterRecord, state: State, *, timeout: float = 20) -> Iterator[Endpoint]:
    token = state.secrets.read(cluster_key(record.name))
    label = f"cluster {record.name}"
    if not record.head_ip:
        raise ClusterError(f"cluster {record.name!r} has no head address recorded "
                           f"(state: {record.state})", hint="run `orchestrate up` again")
    if not record.tunneled:
        yield Endpoint(record.address or f"http://{record.head_ip}:{record.dashboard_port}",
                       token, label)
        return
    config = state.store.read_rendered(record.name)
    if config is None:
        raise ClusterError(f"cluster {record.name!r} has no rendered config "
                           f"({state.store.rendered_path(record.name)})")
    with forward(config.get("auth") or {}, record.head_ip, record.dashboard_port,
                 timeout=timeout) as port:
        yield Endpoint(f"http://127.0.0.1:{port}", token, label, FORWARD)


@contextlib.contextmanager
def forward(auth: Mapping[str, Any], head_ip: str, remote_port: int, *,
            timeout: float) -> Iterator[int]:
    """`ssh -N -L 127.0.0.1:PORT:127.0.0.1:remote_port head`, closed on exit."""
    port = free_port()
    try:
        command = ssh.ssh_command(auth, head_ip)
    except ssh.SshError as exc:
        raise ClusterError(str(exc)) from None
    command[1:1] = ["-N", "-o", "ExitOnForwardFailure=yes",
                    "-L", f"127.0.0.1:{port}:127.0.0.1:{remote_port}"]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_forward(process, port, head_ip, timeout)
        yield port
    finally:
        stop_child_group(process)
        if process.stderr:
            process.stderr.close()


def _wait_forward(process: subprocess.Popen[str], port: int, head_ip: str,
                  timeout: float) -> None:
    def ready() -> bool | None:
        if process.poll() is not None:
            error = (process.stderr.read() if process.stderr else "").strip().splitlines()
            raise ClusterError(f"could not open an SSH port forward to the head {head_ip}: "
                               f"{error[-1] if error else f'ssh exited with {process.returncode}'}")
        return True if http.answers(f"http://127.0.0.1:{port}") else None

    if poll(ready, timeout=timeout, interval=0.2) is None:
        raise ClusterError(f"the SSH port forward to the head {head_ip} did not work within "
                           f"{timeout:.0f} s")
