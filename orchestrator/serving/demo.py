"""`orchestrate demo NAME`: a served model's demo page (`demo: true` in its service file;
`workload.demo_app`, a Gradio app) in a browser, signed in, until Ctrl-C.

    show(name, state, browser=..., progress=..., ready=...)

As `orchestrate dashboard` does for Ray's dashboard: a one-time link on this machine's loopback
(`reach.signin.SignIn`) whose opening sets the page's cookie and redirects to the page. The
cookie is made here when the link is opened, a MAC of its expiry (12 hours on) keyed by the
page's secret (made by `orchestrate serve`, kept here 0600; the replica holds its SHA-256):
neither the API token nor the secret itself, and no request to the service carries it for the
link. Cookies are scoped by host, not port, so one set by the link's 127.0.0.1:PORT with
the page's Path reaches the page on 127.0.0.1 too (the embedded Ray's proxy, or an SSH forward to
a cluster's head, held open while this runs). The secret is never in a URL, a page or the
terminal. An `auth: none` service's page is open: no link, its URL.
"""
from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ServeError
from ..state import ClusterRecord, State
from ..util import http, listeners
from ..util.progress import Progress
from . import serve

PAGE = "/demo/"   # Gradio's page asks for its parts relative to its address
CHECK_EVERY = 2.0   # seconds between asks whether the service still answers
GIVE_UP_AFTER = 10.0   # seconds of failed asks in a row (a reload, a blip on the forward)


@dataclass(frozen=True)
class Opened:
    url: str                   # the page
    sign_in_url: str | None    # the one-time link; None for an `auth: none` service
    service: str
    browser: str               # "opening", "--no-browser", or why none opens ("not opened: ...")

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "sign_in_url": self.sign_in_url, "service": self.service,
                "browser": self.browser}


NO_PAGE = "the service {name} serves no demo page"
NO_PAGE_HINT = "add `demo: true` to its file and `orchestrate serve` it again"


def service_name(target: str) -> str:
    """A service's name, or the name in a service file."""
    if target.endswith((".yaml", ".yml")) or Path(target).is_file():
        from ..language.service import load_service

        return load_service(target).name
    return target


def demo_cookie(name: str, state: State) -> str:
    """The `Set-Cookie` that signs a browser in to the page of the service `name` for
    `demo_page.LIFETIME` from now, from what is recorded here when asked (the link's opening);
    ServeError once the service or its secret is gone."""
    from ..workload.demo_page import cookie_header

    entry = serve.recorded(name, state)
    if not entry.get("auth"):
        raise ServeError(f"the service {name} takes no token: its page needs no sign-in")
    route = str(entry.get("route_prefix") or urllib.parse.urlsplit(str(entry["url"])).path)
    try:
        return cookie_header(serve.demo_secret(name, state), route)
    except ValueError as exc:   # the state is data, and may be shared
        raise ServeError(f"the service {name} is recorded with a route that cannot carry its "
                         f"page's cookie: {exc}",
                         hint="`orchestrate serve` its file again") from None


def show(name: str, state: State, *, browser: bool, progress: Progress,
         ready: Callable[[Opened], None]) -> None:
    """The service `name`'s demo page signed in (a link) and a browser opened on it if
    `browser` and one can be; `ready` told where. Returns never: until KeyboardInterrupt, a
    signal the caller turns into an exception, or ServeError once the service stops answering."""
    from ..observe.dashboard import no_browser_because, open_browser
    from ..reach.signin import SignIn

    entry = serve.recorded(name, state)
    cluster = serve.cluster_of(entry, state)
    if cluster is not None and not cluster.tunneled:
        raise ServeError(f"the cluster {cluster.name} was recorded with its dashboard on the "
                         f"head's address: a browser signed in on this machine's loopback "
                         f"cannot reach the page there", hint="`orchestrate up` the cluster "
                         "again (it is then reached through an SSH forward)")
    parts = urllib.parse.urlsplit(str(entry["url"]))
    route = str(entry.get("route_prefix") or parts.path).rstrip("/")
    if entry.get("demo") is False:   # recorded so by `serve`: no page, and no secret for one
        raise ServeError(NO_PAGE.format(name=name), hint=NO_PAGE_HINT)
    cookie = demo_cookie(name, state) if entry.get("auth") else None   # from the secret kept here
    with serve.reach(parts.hostname or "127.0.0.1", int(parts.port or 80), cluster,
                     state) as base:
        page = base + route + PAGE
        why_not = None if browser else "--no-browser"
        why_not = why_not or no_browser_because()
        if cookie is None:
            _has_page(name, page, None)
            ready(Opened(page, None, name, why_not or "opening"))
            if why_not is None:
                open_browser(page, progress)
            _hold(base + route)
            return
        _ours(base, cluster, state)   # at the moment a sign-in is sent
        _has_page(name, page, cookie)   # there, and it takes a sign-in of the secret kept here
        with SignIn(base, "", landing=route + PAGE, command=f"orchestrate demo {name}",
                    cookie=lambda: demo_cookie(name, state)) as signin:
            signin.used = lambda: progress("a browser signed in with the one-time link")
            ready(Opened(page, signin.url, name, why_not or "opening"))
            if why_not is None:
                open_browser(signin.url, progress)
            _hold(base + route)


def _has_page(name: str, page: str, cookie: str | None) -> None:
    """The service serves the page (and, with `cookie`, lets its cookie in): ServeError
    saying what to do otherwise. Straight to the address, never redirected."""
    headers = {"Cookie": cookie.split(";")[0]} if cookie else {}
    try:
        with http.DIRECT.open(urllib.request.Request(page, headers=headers), timeout=10):
            return
    except urllib.error.HTTPError as exc:
        status: int | None = exc.code
    except OSError:
        status = None
    if status == 404:
        raise ServeError(NO_PAGE.format(name=name), hint=NO_PAGE_HINT)
    if status == 401:
        raise ServeError(f"the service {name} does not take the demo page's secret kept here "
                         f"(served again from elsewhere?)" if cookie else
                         f"the service {name} asks for a sign-in, but is recorded here as "
                         f"open (served again from elsewhere?)",
                         hint="`orchestrate serve` its file again from this machine")
    raise ServeError(f"the demo page of {name} at {page} did not answer"
                     + (f" (HTTP {status})" if status else ""))


def _ours(base: str, cluster: ClusterRecord | None, state: State) -> None:
    """A sign-in to the page goes only to a listener proven ours: the embedded Ray's proxy, or
    our forward."""
    if cluster is None:
        serve._proxy_is_the_embedded_rays(base, state)
        return
    try:
        listeners.check(base)
    except listeners.NotOurs as exc:
        raise ServeError(f"the forward to the service at {base} is not ours: {exc}; no sign-in "
                         f"sent") from None


def _hold(service: str, *, every: float = CHECK_EVERY, give_up: float = GIVE_UP_AFTER) -> None:
    """Until Ctrl-C or a signal, or until the service has not answered its health check for
    `give_up` seconds in a row (a replica reloading a checkpoint or a blip is not the end)."""
    failing_since: float | None = None
    while True:
        if http.status_of(service + "/healthz") == 200:
            failing_since = None
        else:
            now = time.monotonic()
            failing_since = now if failing_since is None else failing_since
            if now - failing_since >= give_up:
                raise ServeError(f"the service stopped answering for {give_up:.0f} s "
                                 f"(unserved, or its Ray stopped)")
        time.sleep(every)
