"""The head's own dashboard, asked with the cluster's token only once it is proven this
user's Ray: the one way the watcher (`autostop`) and the archiver (`archive`) reach it.

A port on 127.0.0.1 is a name anyone on the head can take. On an on-prem head shared with
other users, one of them can bind the dashboard's port while the dashboard is down (before
`ray start`, during a restart) and be sent the token at every poll, or answer for Ray. So,
before a request that carries the token (`get_json`), this proves from /proc (Linux):

- every socket in LISTEN that could take a connection to 127.0.0.1:PORT (bound to 127.0.0.1,
  0.0.0.0, ::ffff:127.0.0.1 or ::, in /proc/net/tcp and tcp6) is owned by this user;
- each of them is held open by a process of this user that runs Ray's dashboard (its command
  line names `ray/dashboard/dashboard.py`, as Ray 2.60's `ray start` runs it), found by the
  socket's inode among /proc/<pid>/fd;
- once connected, before a byte is sent, the server end of that very connection (its row in
  /proc/net/tcp: an accepted socket keeps its listener's owner) is this user's: a listener
  another user put there after the check gets nothing.

Requests ignore the proxies of the environment and follow no redirect. Anything not proven
raises NotOurs (an OSError) and nothing is sent; without /proc nothing is proven. Not proven:
that a process of this user is what its command line says (this user's own processes are
trusted: docs/security.md). Standard library only (this runs on the head).
"""
from __future__ import annotations

import contextlib
import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

HOST = "127.0.0.1"
LISTEN = "0A"
# A closed end: with its process gone (inode 0, shown as uid 0), no one reads what is sent.
CLOSED = {"05", "06", "07"}   # FIN_WAIT2, TIME_WAIT, CLOSE
# The local addresses, as /proc/net/tcp{,6} writes them, of sockets a connection to HOST
# may reach: 127.0.0.1 and 0.0.0.0; ::ffff:127.0.0.1 and :: (a dual-stack listener).
CANDIDATES = {"/proc/net/tcp": {"0100007F", "00000000"},
              "/proc/net/tcp6": {"0000000000000000FFFF00000100007F", "0" * 32}}
DASHBOARD = "ray/dashboard/dashboard.py"


class NotOurs(OSError):
    """The dashboard's port is not proven this user's Ray: nothing was sent there."""

    def __init__(self, port: int, why: str) -> None:
        super().__init__(f"the dashboard at {HOST}:{port} is not proven this user's Ray: "
                         f"{why}; the token was not sent (who listens there: "
                         f"ss -ltnpe 'sport = :{port}')")


def _table(path: str) -> list[list[str]]:
    with open(path) as rows:
        return [row.split() for row in rows.readlines()[1:]]


def _port_of(field: str) -> tuple[str, int]:
    address, _, port = field.partition(":")
    return address, int(port, 16)


def listening(port: int) -> list[tuple[int, int]]:
    """(owner uid, inode) of every socket in LISTEN that could take a connection to
    HOST:port. OSError when /proc/net/tcp cannot be read."""
    found = []
    for path, addresses in CANDIDATES.items():
        try:
            rows = _table(path)
        except OSError:
            if path.endswith("6"):   # a kernel without IPv6
                continue
            raise
        for row in rows:
            if len(row) > 9 and row[3] == LISTEN:
                address, bound = _port_of(row[1])
                if bound == port and address in addresses:
                    found.append((int(row[7]), int(row[9])))
    return found


def is_ray_dashboard(argv: list[str]) -> bool:
    """Whether a command line runs Ray's dashboard (`python .../ray/dashboard/dashboard.py
    --host=... --port=...`; a wrapper such as memray in front is allowed)."""
    return any(arg == DASHBOARD or arg.endswith(f"/{DASHBOARD}") for arg in argv[1:])


def _dashboard_sockets(proc: str = "/proc") -> set[int]:
    """Inodes of the sockets held open by this user's processes that run Ray's dashboard."""
    held: set[int] = set()
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"{proc}/{pid}").st_uid != os.getuid():
                continue
            with open(f"{proc}/{pid}/cmdline", "rb") as cmdline:
                raw = cmdline.read()
            if DASHBOARD.encode() not in raw or not is_ray_dashboard(
                    raw.decode(errors="replace").split("\0")):
                continue
            for fd in os.listdir(f"{proc}/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"{proc}/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        held.add(int(target[8:-1]))
        except (OSError, ValueError):   # gone meanwhile, or not ours to read
            continue
    return held


def check(port: int) -> None:
    """NotOurs unless every listener at HOST:port is this user's and held by this user's Ray
    dashboard (see the module's docstring)."""
    try:
        found = listening(port)
    except OSError as exc:
        raise NotOurs(port, f"/proc/net/tcp cannot be read ({exc.strerror})") from None
    if not found:
        raise NotOurs(port, "nothing listens there")
    strangers = sorted({uid for uid, _ in found if uid != os.getuid()})
    if strangers:
        raise NotOurs(port, f"another user (uid {strangers[0]}) listens there")
    if not {inode for _, inode in found} <= _dashboard_sockets():
        raise NotOurs(port, "a process of this user that is not Ray's dashboard listens there")


def server_end(local: tuple[str, int], peer: tuple[str, int]) -> tuple[str, int, int] | None:
    """(state, owner uid, inode) of the server end of the loopback connection from `local` to
    `peer` (IPv4 addresses; the server end may be an IPv4-mapped IPv6 socket); None when
    /proc/net/tcp shows no such socket (closed and gone)."""
    def v4(host: str) -> str:
        return "".join(f"{int(part):02X}" for part in reversed(host.split(".")))

    ends = {"/proc/net/tcp": (f"{v4(peer[0])}:{peer[1]:04X}", f"{v4(local[0])}:{local[1]:04X}"),
            "/proc/net/tcp6": (f"0000000000000000FFFF0000{v4(peer[0])}:{peer[1]:04X}",
                               f"0000000000000000FFFF0000{v4(local[0])}:{local[1]:04X}")}
    for path, (server, client) in ends.items():   # IPv4 first: the usual, and one read
        with contextlib.suppress(OSError):
            for row in _table(path):
                if len(row) > 9 and (row[1], row[2]) == (server, client):
                    return row[3], int(row[7]), int(row[9])
    return None


class _Connection(http.client.HTTPConnection):
    """HTTP to HOST only, and only once the server end of the connection is this user's."""

    def connect(self) -> None:
        if self.host != HOST:
            raise NotOurs(self.port or 0, f"{self.host} is not the head's loopback")
        super().connect()
        local, peer = self.sock.getsockname()[:2], self.sock.getpeername()[:2]
        found = server_end(local, peer)
        if found is None or (found[0] in CLOSED and found[2] == 0):
            self.sock.close()
            raise ConnectionResetError(f"{HOST}:{peer[1]} closed the connection at once")
        if found[1] != os.getuid():
            self.sock.close()
            raise NotOurs(peer[1], f"the connection was taken by another user (uid {found[1]})")


class _Http(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_Connection, req)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as the error it is (HTTPError), never followed: the token
    would go with it."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: Any, newurl: str) -> None:
        return None


def opener() -> urllib.request.OpenerDirector:
    """No proxy from the environment, no redirect, no scheme but http to HOST."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), _Http(), _NoRedirect())


def get_json(address: str, path: str, token: str | None, timeout: float) -> Any:
    """JSON from the dashboard at `address` (http://127.0.0.1:PORT), with the token, once it
    is proven this user's Ray. NotOurs when it is not (nothing sent); OSError (urllib's
    HTTPError among them) or ValueError when there is no JSON answer."""
    parts = urllib.parse.urlsplit(address)
    port = parts.port or 80
    if parts.scheme != "http" or parts.hostname != HOST:
        raise NotOurs(port, f"{address} is not the head's loopback")
    check(port)
    request = urllib.request.Request(f"http://{HOST}:{port}{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with opener().open(request, timeout=timeout) as answer:
            return json.loads(answer.read().decode("utf-8", errors="replace"))
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, NotOurs):   # raised in _Connection.connect, wrapped by urllib
            raise exc.reason from None
        raise
