"""`orchestrate dashboard`: Ray's dashboard on this machine's loopback, a browser signed in to
it once, held open until Ctrl-C, a signal, or what it reaches goes away.

    show(record, state, port=..., browser=..., progress=..., ready=...)

A cluster's dashboard comes through an SSH forward (`reach.target.open_target(loopback=True)`);
the embedded Ray's is on 127.0.0.1 already. A one-time sign-in link (`reach.signin`) gets the
browser Ray's own token cookie, so nobody pastes the token and it never appears in a URL.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import ClusterError
from ..reach import embedded
from ..reach.endpoint import FORWARD, Endpoint
from ..reach.target import open_target
from ..state import ClusterRecord, State
from ..util.progress import Progress

DEFAULT_PORT = 8265   # `ray dashboard`'s
TEXT_BROWSERS = {"www-browser", "links", "links2", "elinks", "lynx", "w3m"}

StillUp = Callable[[], ClusterError | None]   # None while it is up; else the error to end with


@dataclass(frozen=True)
class Opened:
    url: str
    sign_in_url: str
    target: str        # "cluster NAME" or "the embedded Ray"
    via: str           # how it is reached (reach.endpoint: ssh-forward, embedded, direct)
    browser: str       # "opening", "--no-browser", or why none opens ("not opened: ...")

    @property
    def forwarded(self) -> bool:
        return self.via == FORWARD

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "sign_in_url": self.sign_in_url, "target": self.target,
                "via": self.via, "browser": self.browser}


def local_port(asked: int | None) -> int | None:
    """The forward's local port: the one asked for (checked), else DEFAULT_PORT if free, else
    None (any free one)."""
    from ..util.ports import is_free

    if asked is not None and not 0 < asked < 65536:
        raise ClusterError(f"--port {asked} is not a TCP port (1-65535)")
    if asked is not None:
        return asked
    return DEFAULT_PORT if is_free(DEFAULT_PORT) else None


def show(record: ClusterRecord | None, state: State, *, port: int | None, port_asked: bool,
         browser: bool, progress: Progress, ready: Callable[[Opened], None]) -> None:
    """`record`'s dashboard (None: the embedded Ray's) on `port` (`local_port`'s answer; the
    embedded Ray's keeps its own, said when one was asked for) signed in through a one-time link,
    `ready` told where once it answers, a browser opened if `browser` and one can be; returns
    never: until KeyboardInterrupt, a signal the caller turns into an exception, or
    ClusterError when what it reaches goes away."""
    from ..reach.signin import SignIn

    with _reached(record, state, port, port_asked, progress) as (endpoint, what, still_up), \
            SignIn(endpoint.address, endpoint.token or "") as signin:
        signin.used = lambda: progress("a browser signed in with the one-time link")
        why_not = None if browser else "--no-browser"
        why_not = why_not or no_browser_because()
        ready(Opened(endpoint.address, signin.url, what, endpoint.via, why_not or "opening"))
        if why_not is None:
            open_browser(signin.url, progress)
        _hold(still_up)


@contextlib.contextmanager
def _reached(record: ClusterRecord | None, state: State, port: int | None, port_asked: bool,
             progress: Progress) -> Iterator[tuple[Endpoint, str, StillUp]]:
    """(endpoint on 127.0.0.1, what it is, a check: the error to end with once it is gone)."""
    if record is not None:
        from ..cluster.remote import usable

        usable(record)
        forwards: list[subprocess.Popen[str]] = []
        with open_target(state, record, loopback=True, local_port=port,
                         watch=forwards) as endpoint:
            def forward_closed() -> ClusterError | None:
                code = forwards[0].poll()
                return None if code is None else ClusterError(
                    f"the SSH forward to the head closed (ssh exited with {code}); the dashboard "
                    f"is out of reach", hint=f"`orchestrate status {record.name}` shows its health")

            yield endpoint, f"cluster {record.name}", forward_closed
        return
    # a user of the embedded Ray while it is shown: its watchdog does not stop it meanwhile
    with embedded.user(state.secrets), open_target(state) as endpoint:
        if port_asked:
            progress("--port is for a cluster's forward; the embedded Ray's dashboard keeps "
                     "its own port")

        def stopped() -> ClusterError | None:
            return None if embedded.running_at(endpoint.address) else ClusterError(
                "the embedded Ray stopped (`stop --embedded`, or its last run ended)",
                hint="`orchestrate run` starts it again")

        yield endpoint, embedded.LABEL, stopped


def no_browser_because() -> str | None:
    """Why no browser can be opened here (None: one can). A text browser does not count: it
    would take over this terminal."""
    import webbrowser

    if not (os.environ.get("BROWSER") or os.environ.get("DISPLAY") or
            os.environ.get("WAYLAND_DISPLAY") or sys.platform in ("darwin", "win32")):
        return "not opened: no display (set DISPLAY, or BROWSER to a browser command)"
    try:
        found = webbrowser.get()
    except webbrowser.Error as exc:
        return f"not opened: {exc}"
    if getattr(found, "name", "") in TEXT_BROWSERS:
        return f"not opened: only a text browser ({found.name}) was found"
    return None


def open_browser(url: str, progress: Progress) -> None:
    """Start the browser on `url` in the background: some browser commands return only when
    the browser is closed, and the dashboard must be served meanwhile."""
    import threading
    import webbrowser

    def start() -> None:
        try:
            if not webbrowser.get().open(url):
                progress("the browser command failed; open the sign-in link above by hand")
        except webbrowser.Error as exc:
            progress(f"the browser did not start ({exc}); open the sign-in link above by hand")

    threading.Thread(target=start, daemon=True).start()


def _hold(still_up: StillUp) -> None:
    """Until Ctrl-C or a signal, or until what we reach goes away (its ClusterError)."""
    while True:
        gone = still_up()
        if gone:
            raise gone
        time.sleep(0.5)
