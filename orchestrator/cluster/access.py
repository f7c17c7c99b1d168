"""Reaching a recorded cluster: its job-submission address and token, through SSH if need be.

    with open_cluster("mycluster") as access:        # or the cluster YAML's path
        JobSubmissionClient(access.address, headers=access.headers)

When the dashboard binds to the head's loopback (cloud providers), an `ssh -N -L` forward from
a free local port to the head's dashboard port is opened for the duration of the block.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..errors import ClusterError
from . import state
from .launcher import stop_process_group
from .ssh import ssh_command


@dataclass(frozen=True)
class Access:
    address: str                         # http://host:port, usable from this machine now
    token: str = field(repr=False)
    name: str = ""

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}


def resolve(name_or_path: str) -> state.Record:
    """The record for a cluster name or the path of its YAML file."""
    if state.is_valid_name(name_or_path):  # a corrupted record is reported, not skipped
        record = state.read_record(name_or_path)
        if record is not None:
            return record
    path = Path(name_or_path).expanduser()
    if path.is_file():
        absolute = str(path.resolve())
        for record in state.list_records():
            if record.file == absolute:
                return record
        from ..spec.cluster import load_cluster

        record = state.read_record(load_cluster(path).name)
        if record is not None:
            return record
    known = ", ".join(r.name for r in state.list_records()) or "none"
    raise ClusterError(f"no cluster {name_or_path!r} is recorded (known: {known})",
                       hint="start it with `orchestrate up CLUSTER.yaml`")


def rendered_config(name: str) -> dict:
    config = state.read_rendered(name)
    if config is None:
        raise ClusterError(f"cluster {name!r} has no rendered config ({state.rendered_path(name)})")
    return config


@contextlib.contextmanager
def open_cluster(name_or_path: str, *, timeout: float = 20) -> Iterator[Access]:
    record = resolve(name_or_path)
    with open_record(record, timeout=timeout) as access:
        yield access


@contextlib.contextmanager
def open_record(record: state.Record, *, timeout: float = 20) -> Iterator[Access]:
    token = state.read_token(record.name)
    if not record.head_ip:
        raise ClusterError(f"cluster {record.name!r} has no head address recorded "
                           f"(state: {record.state})", hint="run `orchestrate up` again")
    if not record.tunneled:
        yield Access(record.address or f"http://{record.head_ip}:{record.dashboard_port}",
                     token, record.name)
        return
    auth = rendered_config(record.name).get("auth") or {}
    with forward(auth, record.head_ip, record.dashboard_port, timeout=timeout) as port:
        yield Access(f"http://127.0.0.1:{port}", token, record.name)


@contextlib.contextmanager
def forward(auth: dict, head_ip: str, remote_port: int, *, timeout: float) -> Iterator[int]:
    """`ssh -N -L 127.0.0.1:PORT:127.0.0.1:remote_port head`, closed on exit."""
    port = _free_port()
    command = ssh_command(auth, head_ip)
    command[1:1] = ["-N", "-o", "ExitOnForwardFailure=yes",
                    "-L", f"127.0.0.1:{port}:127.0.0.1:{remote_port}"]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_forward(process, port, head_ip, timeout)
        yield port
    finally:
        stop_process_group(process)
        if process.stderr:
            process.stderr.close()


def _wait_forward(process: subprocess.Popen, port: int, head_ip: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = (process.stderr.read() if process.stderr else "").strip().splitlines()
            raise ClusterError(f"could not open an SSH port forward to the head {head_ip}: "
                               f"{error[-1] if error else f'ssh exited with {process.returncode}'}")
        if _answers(f"http://127.0.0.1:{port}/api/version"):
            return
        time.sleep(0.2)
    raise ClusterError(f"the SSH port forward to the head {head_ip} did not work within "
                       f"{timeout:.0f} s")


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        return True  # 401 without a token: the dashboard is there
    except OSError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(access: Access) -> dict:
    """Variables that make Ray's own clients (ray job submit, JobSubmissionClient) use access."""
    return {**os.environ, "RAY_API_SERVER_ADDRESS": access.address, "RAY_ADDRESS": access.address,
            "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": access.token}
