"""A TCP port on 127.0.0.1 that this process binds and holds, piped to a Unix socket.

An SSH forward listens on a Unix socket in a 0700 folder of ours (`ssh -L PATH:host:port`): no
other user can reach it or take its place. urllib, Ray's job client (requests, aiohttp) and a
browser speak TCP, so `Relay` binds 127.0.0.1:PORT itself (port 0, or the one asked for) before
anything is started, keeps it for the whole block, and pipes each connection to the socket.
The port is never free between being chosen and being used, so nobody can be there instead
(see `listeners`). A connection from another user (the peer socket's uid in /proc/net/tcp) is
closed unanswered: the forward is this user's.
"""
from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable

from .listeners import peer_uid

CHUNK = 65536


class Relay:
    def __init__(self, target: str | Callable[[], socket.socket], *, port: int = 0,
                 host: str = "127.0.0.1") -> None:
        """Bind `host:port` now (OSError if taken); connections go to the Unix socket
        `target` once `start()` is called, or to what `target()` connects for each (a
        Kubernetes port-forward's stream: OSError when it cannot)."""
        self.target = target
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._server.bind((host, port))
            self._server.listen(64)
        except OSError:
            self._server.close()
            raise
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.getsockname()[1])

    def start(self) -> Relay:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        with self._lock:
            for sock in list(self._open):
                _close(sock)
            self._open.clear()
        if self._thread.is_alive():
            self._thread.join(5)

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, address = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client, address), daemon=True).start()

    def _serve(self, client: socket.socket, address: tuple[str, int]) -> None:
        server = self._server.getsockname()
        if os.path.exists("/proc/net/tcp") and peer_uid(address, server) != os.getuid():
            _close(client)
            return
        try:
            upstream = self._connect()
        except OSError:
            _close(client)
            return
        with self._lock:
            if self._closed.is_set():
                _close(client)
                _close(upstream)
                return
            self._open.update((client, upstream))
        back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
        back.start()
        _pipe(client, upstream)
        back.join()
        with self._lock:
            self._open.difference_update((client, upstream))
        _close(client)
        _close(upstream)


    def _connect(self) -> socket.socket:
        if callable(self.target):
            return self.target()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.target)
        except OSError:
            _close(upstream)
            raise
        return upstream


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy until `source` ends, then end `sink`'s writing side."""
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
