"""Where a command reaches Ray: one `Endpoint` (address, token, how it was reached).

    with open_cluster(record, state) as endpoint:    # a recorded cluster
        JobsClient(endpoint) ...
    embedded.session() ... ray.endpoint()            # the embedded Ray

Which of them a command reaches is decided in `target.open_target`.

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

from ..errors import ClusterError
from ..state import ClusterRecord, State, cluster_key
from ..util import http, ssh
from ..util.ports import free_port, is_free
from ..util.processes import dies_with_parent, stop_child_group
from ..util.waiting import poll

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


def rendered(record: ClusterRecord, state: State) -> dict[str, Any]:
    """The Ray cluster config `ray up` was given for `record` (its auth reaches the head)."""
    config = state.store.read_rendered(record.name)
    if config is None:
        raise ClusterError(f"cluster {record.name!r} has no rendered config "
                           f"({state.store.rendered_path(record.name)})")
    return config


@contextlib.contextmanager
def open_dashboard(record: ClusterRecord, state: State, *, local_port: int | None,
                   timeout: float = 20,
                   watch: list[subprocess.Popen[str]] | None = None) -> Iterator[Endpoint]:
    """A cluster's dashboard on this machine's loopback, whether or not its jobs need a
    forward: a browser signs in with a cookie for 127.0.0.1 (orchestrator.reach.signin)."""
    token = state.secrets.read(cluster_key(record.name))
    head = _head_ip(record)
    config = rendered(record, state)
    host = record.dashboard_host
    remote_host = "127.0.0.1" if record.tunneled or host in ("0.0.0.0", "::") else host
    with forward(config.get("auth") or {}, head, record.dashboard_port,
                 timeout=timeout, local_port=local_port, remote_host=remote_host,
                 watch=watch) as port:
        yield Endpoint(f"http://127.0.0.1:{port}", token, f"cluster {record.name}", FORWARD)


@contextlib.contextmanager
def forward(auth: Mapping[str, Any], head_ip: str, remote_port: int, *, timeout: float,
            local_port: int | None = None, remote_host: str = "127.0.0.1",
            watch: list[subprocess.Popen[str]] | None = None) -> Iterator[int]:
    """`ssh -N -L 127.0.0.1:PORT:remote_host:remote_port head`, closed on exit. PORT is
    `local_port` (ClusterError if taken), else a free one. `watch` gets the ssh process, for
    a caller that keeps the forward open and must notice when it dies."""
    if local_port is not None and not is_free(local_port):
        raise ClusterError(f"local port {local_port} is taken on this machine",
                           hint="choose another with --port, or leave --port out for a free one")
    port = local_port or free_port()
    try:
        command = ssh.ssh_command(auth, head_ip)
    except ssh.SshError as exc:
        raise ClusterError(str(exc)) from None
    command[1:1] = ["-N", "-o", "ExitOnForwardFailure=yes",
                    "-L", f"127.0.0.1:{port}:{remote_host}:{remote_port}"]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=dies_with_parent())  # noqa: PLW1509 - one C call
    if watch is not None:
        watch.append(process)
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
