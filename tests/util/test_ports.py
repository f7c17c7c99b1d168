"""`util.ports.is_free` answers for the forward's own bind (`util.relay`, SO_REUSEADDR): a port
with a listener is taken; one whose connections linger in TIME_WAIT, after the forward on that
port closed them first, is free again for the next forward (a plain bind is refused for a
minute). Real sockets on loopback."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from orchestrator.util.ports import free_port, is_free
from orchestrator.util.relay import Relay


def time_wait_on(port: int) -> bool:
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(row.split()[1].endswith(f":{port:04X}") and row.split()[3] == "06" for row in rows)


def test_a_listener_takes_the_port_and_time_wait_after_it_does_not():
    port = free_port()
    with Relay("/nonexistent/upstream.sock", port=port).start():
        assert not is_free(port)                   # the forward listens
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            # no upstream: the forward closes the connection, its side first
            assert client.recv(1) == b""
    assert time_wait_on(port), "no TIME_WAIT on the port: the test would prove nothing"
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))            # what is_free once tried: refused
    assert is_free(port)                           # free for the forward's bind
    with Relay("/nonexistent/upstream.sock", port=port) as again:
        assert again.port == port and not is_free(port)
