"""Real listeners for the trust-boundary tests: a squatter in another process that records every
byte it is sent, and in-process HTTP servers (a dashboard, a "proxy", a redirect target) that
record the requests they get."""
from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# Listens on 127.0.0.1:PORT (0: any), prints the port, answers every request 200 {"ray_version"...}
# as a dashboard would, and appends all it receives to a file: another process than the test's.
SQUATTER = r"""
import socket, sys, threading
port, log = int(sys.argv[1]), sys.argv[2]
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", port))
server.listen(16)
print(server.getsockname()[1], flush=True)
body = b'{"ray_version": "2.60.0", "version": "4", "ray_commit": "x"}'
def serve(conn):
    data = conn.recv(65536)
    with open(log, "ab") as out:
        out.write(data)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    conn.close()
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


class Squatter:
    def __init__(self, log: Path, port: int = 0) -> None:
        self.log = log
        log.write_bytes(b"")
        self.process = subprocess.Popen([sys.executable, "-c", SQUATTER, str(port), str(log)],
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())
        self.address = f"http://127.0.0.1:{self.port}"

    @property
    def received(self) -> bytes:
        return self.log.read_bytes()

    def close(self) -> None:
        self.process.kill()
        self.process.wait(10)
        if self.process.stdout:
            self.process.stdout.close()


@contextlib.contextmanager
def squatter(log: Path, port: int = 0) -> Iterator[Squatter]:
    sq = Squatter(log, port)
    try:
        yield sq
    finally:
        sq.close()


class Recorder:
    """What an in-process server was sent: (method, path, headers) per request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.address = ""

    def authorizations(self) -> list[str]:
        return [h["Authorization"] for _, _, h in self.requests if "Authorization" in h]


@contextlib.contextmanager
def serving(answer: Any = None, *, redirect_to: str | None = None, port: int = 0,
            respond: Callable[[str], tuple[int, Any]] | None = None) -> Iterator[Recorder]:
    """An HTTP server in this process on 127.0.0.1 (`port`, else any): answers `answer` as JSON
    (a dashboard's /api/version by default), or 302 to `redirect_to`, or what `respond(path)`
    returns (status, JSON); records every request."""
    recorder = Recorder()
    import ray  # noqa: F401 - only for the version a real dashboard would name

    body = json.dumps(answer if answer is not None else
                      {"version": "4", "ray_version": ray.__version__,
                       "ray_commit": ray.__commit__}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            recorder.requests.append((self.command, self.path, dict(self.headers.items())))
            if redirect_to:
                self.send_response(302)
                self.send_header("Location", redirect_to + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status, reply = 200, body
            if respond is not None:
                status, answered = respond(self.path)
                reply = json.dumps(answered).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        do_GET = do_POST = do_PUT = do_CONNECT = _any  # noqa: N815 - http.server's names

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    recorder.address = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                   "all_proxy")


def set_proxy(monkeypatch: Any, proxy: str) -> None:
    """Every proxy variable at `proxy`, and nothing exempted."""
    for name in PROXY_VARIABLES:
        monkeypatch.setenv(name, proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
