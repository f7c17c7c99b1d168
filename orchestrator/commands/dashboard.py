"""orchestrate dashboard [NAME]: Ray's dashboard in a browser, signed in, until Ctrl-C.

A cluster's dashboard is brought to this machine's loopback by an SSH forward; the local Ray's
is there already. A one-time sign-in link (orchestrator.reach.signin) gets the browser Ray's own
token cookie, so nobody pastes the token and it never appears in a URL.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ClusterError, JobError, Terminated
from ..output import add_format_argument, emit_json, info

DEFAULT_PORT = 8265   # `ray dashboard`'s


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", metavar="NAME|CLUSTER.yaml",
                        help="the cluster (default: the only one recorded, else the local Ray)")
    parser.add_argument("--local-ray", action="store_true",
                        help="the embedded local Ray's dashboard, even when clusters are recorded")
    parser.add_argument("-p", "--port", type=int, metavar="PORT",
                        help=f"local port of the forward (default: {DEFAULT_PORT} if free, "
                             f"else any free one)")
    parser.add_argument("--no-browser", action="store_true",
                        help="print the URL and a one-time sign-in link; open no browser")
    add_format_argument(parser)


def run(args: argparse.Namespace) -> int:
    from ..reach.signin import SignIn
    from ..state import State
    from ..util.ports import is_free

    if args.port is not None and not 0 < args.port < 65536:
        raise ClusterError(f"--port {args.port} is not a TCP port (1-65535)")
    if args.local_ray and args.name:
        raise ClusterError("name a cluster or give --local-ray, not both")
    state = State.here()
    port = args.port if args.port is not None or not is_free(DEFAULT_PORT) else DEFAULT_PORT

    def terminated(*_: object) -> None:
        raise Terminated()

    # SIGTERM, and SIGHUP (the terminal closed), unwind like Ctrl-C: the forward is closed.
    before = {number: signal.signal(number, terminated) for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with _reached(args, state, port) as (endpoint, what, still_up), \
                SignIn(endpoint.address, endpoint.token or "") as signin:
            signin.used = lambda: info("a browser signed in with the one-time link")
            why_not = "--no-browser" if args.no_browser else no_browser_because()
            report = {"url": endpoint.address, "sign_in_url": signin.url, "target": what,
                      "via": endpoint.via, "browser": why_not or "opening"}
            _tell(report, args.format)
            if why_not is None:
                open_browser(signin.url)
            _hold(still_up)
    except Terminated:
        info("stopped by a signal; closed")
        return 143
    except KeyboardInterrupt:
        info("closed")
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
    return 0


@contextlib.contextmanager
def _reached(args: argparse.Namespace, state: Any,
             port: int) -> Iterator[tuple[Any, str, Callable[[], ClusterError | None]]]:
    """(endpoint on 127.0.0.1, what it is, a check: the error to end with once it is gone)."""
    from ..cluster.remote import usable
    from ..reach import embedded
    from ..reach.endpoint import open_dashboard
    from ..util.processes import alive
    from . import pick

    if not args.local_ray and (args.name or state.store.list_clusters()):
        record = pick.named_or_only(args.name, state, "dashboard")
        usable(record)
        forwards: list[subprocess.Popen[str]] = []
        with open_dashboard(record, state, local_port=port, watch=forwards) as endpoint:
            def forward_closed() -> ClusterError | None:
                code = forwards[0].poll()
                return None if code is None else ClusterError(
                    f"the SSH forward to the head closed (ssh exited with {code}); the dashboard "
                    f"is out of reach", hint=f"`orchestrate status {record.name}` shows its health")

            yield endpoint, f"cluster {record.name}", forward_closed
        return
    ray = embedded.current(state.secrets)
    if args.port is not None:
        info("--port is for a cluster's forward; the local Ray's dashboard keeps its own port")
    if ray is None:
        raise JobError("no cluster is recorded and no local Ray is running",
                       hint="the local Ray runs while `orchestrate run` uses it (or after "
                            "`run --detach`); `orchestrate up CLUSTER.yaml` starts a cluster")
    def stopped() -> ClusterError | None:
        return None if alive(ray.pid) else ClusterError(
            "the local Ray stopped (its last run ended, or `stop --local-ray`)",
            hint="`orchestrate run --detach` keeps it up for a job")

    yield ray.endpoint(state.secrets), embedded.LABEL, stopped


TEXT_BROWSERS = {"www-browser", "links", "links2", "elinks", "lynx", "w3m"}


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


def open_browser(url: str) -> None:
    """Start the browser on `url` in the background: some browser commands return only when
    the browser is closed, and the dashboard must be served meanwhile."""
    import threading
    import webbrowser

    def start() -> None:
        try:
            if not webbrowser.get().open(url):
                info("the browser command failed; open the sign-in link above by hand")
        except webbrowser.Error as exc:
            info(f"the browser did not start ({exc}); open the sign-in link above by hand")

    threading.Thread(target=start, daemon=True).start()


def _tell(report: dict[str, Any], form: str) -> None:
    from ..reach.signin import LIFETIME

    if form == "json":
        emit_json(report)
    else:
        print(report["url"])
    sys.stdout.flush()
    info(f"Ray dashboard of {report['target']} at {report['url']}"
         + (" (an SSH forward to the head)" if report["via"] == "ssh-forward" else ""))
    if report["browser"] == "opening":
        info("opening your browser with a one-time sign-in link")
    elif report["browser"] != "--no-browser":
        info(f"browser {report['browser']}")
    info(f"sign a browser in once with: {report['sign_in_url']}\n"
         f"  (good for one use, for {LIFETIME / 60:.0f} minutes while this runs; without it the "
         f"dashboard asks for the token)")
    info("Ctrl-C to close")


def _hold(still_up: Callable[[], ClusterError | None]) -> None:
    """Until Ctrl-C or a signal, or until what we reach goes away (its ClusterError)."""
    while True:
        gone = still_up()
        if gone:
            raise gone
        time.sleep(0.5)
