"""A browser signed in to Ray's dashboard without anyone pasting the token.

Ray 2.60's dashboard takes the token three ways: the `Authorization` header (clients), the
`X-Ray-Authorization` header (proxies), and the `ray-authentication-token` cookie, which its own
login page gets from `POST /api/authenticate` (token in the `Authorization` header; answer: an
HttpOnly, SameSite=Strict cookie, `Path=/`, Secure only over HTTPS, whose value is the token
itself: no session, no expiry on Ray's side, no logout). A browser cannot be told to send a
header, so it needs that cookie, and only Ray's endpoint is trusted to make it.

`SignIn` serves one link on this machine's loopback, `http://127.0.0.1:PORT/sign-in/NONCE`
(a random nonce, good once, only while the command runs). Opening it makes us call Ray's
`/api/authenticate` with the token and hand Ray's own `Set-Cookie` to the browser, with a
redirect to the dashboard. Cookies are scoped by host, not by port (RFC 6265, section 8.5), so a
cookie set by 127.0.0.1:PORT is sent to the dashboard at 127.0.0.1:ITS_PORT: the dashboard URL
must be on 127.0.0.1 too (a forward, or the embedded Ray). The token is never in a URL, a page, a
log or the terminal; the nonce is, but it is spent by the first browser that opens it, lapses
after `LIFETIME`, and on Linux is honoured only for a connection of our own user (the uid of
the peer's socket in /proc/net/tcp): the link reaches the browser on its command line, which
other users can read. The cookie is handed on as a session cookie (Ray's `Max-Age` of 30 days
dropped), so it ends with the browser session rather than a month later.
"""
from __future__ import annotations

import hmac
import http.cookies
import http.server
import os
import secrets
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from ..errors import ClusterError, OrchestrateError
from ..util import listeners
from ..util.http import DIRECT
from ..util.listeners import peer_uid

COOKIE_ENDPOINT = "/api/authenticate"
COOKIE_NAME = "ray-authentication-token"
PATH = "/sign-in/"
LIFETIME = 600.0   # seconds a link is good for


def ray_cookie(dashboard: str, token: str, *, timeout: float = 10) -> str:
    """The `Set-Cookie` value Ray's dashboard answers a valid token with, made a session
    cookie. Straight to the loopback address, to a listener proven ours, never redirected: a
    configured HTTP proxy, a stranger on the port or a redirect target never sees the token."""
    request = urllib.request.Request(dashboard.rstrip("/") + COOKIE_ENDPOINT, data=b"",
                                     headers={"Authorization": f"Bearer {token}"}, method="POST")
    try:
        listeners.check(dashboard)
    except listeners.NotOurs as exc:
        raise ClusterError(f"the dashboard at {dashboard} is not ours: {exc}; no token sent") \
            from None
    try:
        with DIRECT.open(request, timeout=timeout) as response:
            cookie: str | None = response.headers.get("Set-Cookie")
    except urllib.error.HTTPError as exc:
        raise ClusterError(f"the dashboard refused the recorded token (HTTP {exc.code})",
                           hint="the cluster may have been started again with another token: "
                                "`orchestrate up` it") from None
    except OSError as exc:
        raise ClusterError(f"the dashboard at {dashboard} did not answer: "
                           f"{getattr(exc, 'reason', exc)}") from None
    if not cookie:
        raise ClusterError("the dashboard accepted the token but set no cookie "
                           "(is token authentication off on it?)")
    return session_cookie(cookie)


def session_cookie(header: str) -> str:
    """Ray's `Set-Cookie` without its lifetime; ClusterError unless it is the one cookie we
    expect, host-only (no Domain) and HttpOnly."""
    jar: http.cookies.SimpleCookie = http.cookies.SimpleCookie()
    try:
        jar.load(header)
    except http.cookies.CookieError:
        jar.clear()
    morsel = jar.get(COOKIE_NAME)
    if len(jar) != 1 or morsel is None or morsel["domain"] or not morsel["httponly"]:
        raise ClusterError(f"the dashboard answered with an unexpected cookie "
                           f"(expected one HttpOnly {COOKIE_NAME!r} for this host)")
    morsel["max-age"] = ""
    morsel["expires"] = ""
    return morsel.OutputString()


class SignIn:
    """The one-time sign-in link for `dashboard` (a 127.0.0.1 URL), served until `close()`."""

    def __init__(self, dashboard: str, token: str, *, landing: str = "/",
                 cookie: Callable[[], str] | None = None,
                 command: str = "orchestrate dashboard") -> None:
        """`cookie`: makes the `Set-Cookie` to hand on (default: Ray's, `ray_cookie`; the demo
        page of a service: an expiring sign-in of its own secret, `serving.demo`, with
        `token` unused); an
        OrchestrateError it raises is the browser's 502 page; `command`: the one to run again."""
        self.dashboard = dashboard.rstrip("/")
        self._token = token
        self._cookie = cookie or (lambda: ray_cookie(self.dashboard, self._token))
        self.command = command
        self._nonce = secrets.token_urlsafe(32)
        self._spent = threading.Event()
        self._until = time.monotonic() + LIFETIME
        self._lock = threading.Lock()   # one browser spends the link, even if two race
        self.landing = landing
        self.used: Callable[[], None] = lambda: None   # called once the link has been used
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{PATH}{self._nonce}"

    @property
    def spent(self) -> bool:
        return self._spent.is_set()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> SignIn:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _answer(self, path: str, client: tuple[str, int]) -> tuple[int, dict[str, str], str]:
        """(status, headers, body) for a GET of `path` from `client`."""
        if not path.startswith(PATH):
            return 404, {}, "Not found.\n"
        if not hmac.compare_digest(path[len(PATH):].encode(), self._nonce.encode()):
            return 404, {}, "Not found: this is not the current sign-in link.\n"
        if os.path.exists("/proc/net/tcp") and \
                peer_uid(client, ("127.0.0.1", self.port)) != os.getuid():
            return 403, {}, f"Forbidden: this link is for the user who ran `{self.command}`.\n"
        with self._lock:
            if self._spent.is_set() or time.monotonic() > self._until:
                return 410, {}, ("This sign-in link was used already or is too old. "
                                 f"Run `{self.command}` again for a new one.\n")
            try:
                cookie = self._cookie()
            except OrchestrateError as exc:   # ClusterError (Ray's), ServeError (a page's)
                return 502, {}, f"Could not sign in: {exc.message}\n"
            self._spent.set()
        self.used()
        return 303, {"Set-Cookie": cookie, "Location": self.dashboard + self.landing}, \
            "Signed in.\n"

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
                status, headers, body = owner._answer(self.path, self.client_address[:2])
                data = body.encode()
                self.send_response(status)
                for name, value in {**headers, "Content-Type": "text/plain; charset=utf-8",
                                    "Content-Length": str(len(data)),
                                    "Cache-Control": "no-store",
                                    "Referrer-Policy": "no-referrer"}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: object) -> None:  # the path holds the nonce: no log
                return

        return Handler
