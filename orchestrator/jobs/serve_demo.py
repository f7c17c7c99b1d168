"""`orchestrate demo NAME`: a served model's demo page (`demo: true` in its service file;
`workload.demo_page`) in a browser, signed in, until Ctrl-C.

    show(name, state, browser=..., progress=..., ready=...)

As `orchestrate dashboard` does for Ray's dashboard: a one-time link on this machine's loopback
(`reach.signin.SignIn`) whose opening asks the service's `POST {route}/sign-in` for its cookie
with the token (kept here, 0600) and hands that cookie to the browser with a redirect to the
page. The token is never in a URL, a page or the terminal. Cookies are scoped by host, not port:
the page must be on 127.0.0.1 too (the embedded Ray's proxy, or an SSH forward to a cluster's
head, held open while this runs). An `auth: none` service's page is open: no link, its URL.
"""
from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import Any

from ..errors import ServeError
from ..state import ClusterRecord, State
from ..util import http, listeners
from ..util.progress import Progress
from . import serve

PAGE = "/demo"
SIGN_IN = "/sign-in"
CHECK_EVERY = 2.0   # seconds between asks whether the service still answers


@dataclass(frozen=True)
class Opened:
    url: str                   # the page
    sign_in_url: str | None    # the one-time link; None for an `auth: none` service
    service: str
    browser: str               # "opening", "--no-browser", or why none opens ("not opened: ...")

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "sign_in_url": self.sign_in_url, "service": self.service,
                "browser": self.browser}


def service_name(target: str) -> str:
    """A service's name, or the name in a service file."""
    if target.endswith((".yaml", ".yml")) or Path(target).is_file():
        from ..language.service import load_service

        return load_service(target).name
    return target


def service_cookie(base: str, route: str, token: str, *, timeout: float = 10) -> str:
    """The `Set-Cookie` the service's `POST {route}/sign-in` answers the token with: straight to
    the loopback address (checked ours by the caller), never redirected; ServeError unless it
    is the one HttpOnly, host-only cookie the page expects."""
    from ..workload.demo_page import COOKIE

    request = urllib.request.Request(base + route + SIGN_IN, data=b"", method="POST",
                                     headers=http.bearer(token))
    try:
        with http.DIRECT.open(request, timeout=timeout) as response:
            header = response.headers.get("Set-Cookie") or ""
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise ServeError("the service serves no demo page", hint="add `demo: true` to its "
                             "file and `orchestrate serve` it again") from None
        raise ServeError(f"the service refused the recorded token (HTTP {exc.code})",
                         hint="`orchestrate serve` its file again") from None
    except OSError as exc:
        raise ServeError(f"the service at {base} did not answer: "
                         f"{getattr(exc, 'reason', exc)}") from None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        jar.clear()
    morsel = jar.get(COOKIE)
    if len(jar) != 1 or morsel is None or morsel["domain"] or not morsel["httponly"]:
        raise ServeError(f"the service answered with an unexpected cookie (expected one "
                         f"HttpOnly {COOKIE!r} for this host)")
    return header


def show(name: str, state: State, *, browser: bool, progress: Progress,
         ready: Callable[[Opened], None]) -> None:
    """The service `name`'s demo page signed in (a link) and a browser opened on it if
    `browser` and one can be; `ready` told where. Returns never: until KeyboardInterrupt, a
    signal the caller turns into an exception, or ServeError once the service stops answering."""
    from ..reach.signin import SignIn
    from .dashboard import no_browser_because, open_browser

    entry = serve.recorded(name, state)
    cluster = serve.cluster_of(entry, state)
    if cluster is not None and not cluster.tunneled:
        raise ServeError(f"the cluster {cluster.name} was recorded with its dashboard on the "
                         f"head's address: a browser signed in on this machine's loopback "
                         f"cannot reach the page there", hint="`orchestrate up` the cluster "
                         "again (it is then reached through an SSH forward)")
    parts = urllib.parse.urlsplit(str(entry["url"]))
    route = str(entry.get("route_prefix") or parts.path).rstrip("/")
    token = serve.token(name, state) if entry.get("auth") else None
    with serve.reach(parts.hostname or "127.0.0.1", int(parts.port or 80), cluster,
                     state) as base:
        _ours(base, cluster, state)
        page = base + route + PAGE
        why_not = None if browser else "--no-browser"
        why_not = why_not or no_browser_because()
        if token is None:
            if http.status_of(page) == 404:
                raise ServeError(f"the service {name} serves no demo page",
                                 hint="add `demo: true` to its file and `orchestrate serve` "
                                      "it again")
            ready(Opened(page, None, name, why_not or "opening"))
            if why_not is None:
                open_browser(page, progress)
            _hold(base + route)
            return
        service_cookie(base, route, token)   # the page is there and takes the token: say so now
        with SignIn(base, token, landing=route + PAGE, command=f"orchestrate demo {name}",
                    cookie=lambda: service_cookie(base, route, token)) as signin:
            signin.used = lambda: progress("a browser signed in with the one-time link")
            ready(Opened(page, signin.url, name, why_not or "opening"))
            if why_not is None:
                open_browser(signin.url, progress)
            _hold(base + route)


def _ours(base: str, cluster: ClusterRecord | None, state: State) -> None:
    """The token goes only to a listener proven ours: the embedded Ray's proxy, or our
    forward."""
    if cluster is None:
        serve._proxy_is_the_embedded_rays(base, state)
        return
    try:
        listeners.check(base)
    except listeners.NotOurs as exc:
        raise ServeError(f"the forward to the service at {base} is not ours: {exc}; no token "
                         f"sent") from None


def _hold(service: str) -> None:
    """Until Ctrl-C or a signal, or until the service no longer answers its health check."""
    while True:
        if http.status_of(service + "/healthz") != 200:
            raise ServeError("the service stopped answering (unserved, or its Ray stopped)")
        time.sleep(CHECK_EVERY)
