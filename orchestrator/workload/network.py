"""Run in every worker process of the job (by `worker.setup`, the runtime_env's
`worker_process_setup_hook`): point Gloo and NCCL at the network interface that carries this
node's Ray address.

Without it, each torch worker takes the address its hostname resolves to, and on hosts whose
`/etc/hosts` maps the hostname to loopback (Debian's `127.0.1.1 <hostname>` line) a multi-host
run fails with `Gloo connectFullMesh failed ... remote=[127.0.0.1]`. A value the user set wins.
"""
from __future__ import annotations

import os
import socket
import struct
import sys

SIOCGIFADDR = 0x8915   # Linux: the interface's IPv4 address
VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def interface_of(ip: str) -> str | None:
    """The name of the interface whose IPv4 address is `ip` (Linux), or None."""
    if sys.platform != "linux":
        return None
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR,
                                     struct.pack("256s", name.encode()[:15]))
            except OSError:   # no IPv4 address on it
                continue
            if socket.inet_ntoa(answer[20:24]) == ip:
                return name
    return None


def setup() -> None:
    if all(name in os.environ for name in VARIABLES):
        return
    import ray

    interface = interface_of(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    if interface is not None:
        for name in VARIABLES:
            os.environ.setdefault(name, interface)
