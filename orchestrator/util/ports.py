"""Free TCP ports on loopback.

A free port is free only until someone binds it, and its number, once handed to another
program, is in /proc/*/cmdline for every local user to see: never hand one to a program that
will then be sent a credential (issue 29). Bind the port yourself and keep it
(`util.relay.Relay`), or let the program bind port 0 and read back what it bound
(`reach.embedded`). These are for ports nobody sends a token to.
"""
from __future__ import annotations

import socket


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports that were free a moment ago (all held open together while chosen)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((host, 0))
            sockets.append(sock)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Nothing listens on `port` (and we may bind it) right now. Bound as the forward binds it
    (`util.relay`, SO_REUSEADDR): a port whose last connections linger in TIME_WAIT (a minute
    after the side on this port closed them) is free for it, one with a listener is not."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


# Addresses that only this machine (or a head, of itself) can reach.
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    return host in LOOPBACK
