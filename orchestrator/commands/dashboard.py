"""orchestrate dashboard [NAME]: Ray's dashboard in a browser, signed in, until Ctrl-C
(the use case: `observe.dashboard`).
"""
from __future__ import annotations

import argparse
import signal
import sys

from ..errors import ClusterError, Terminated
from ..observe import dashboard
from ..output import add_format_argument, emit_json, info


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", metavar="NAME|CLUSTER.yaml",
                        help="the cluster (default: the only one recorded, else the embedded Ray)")
    parser.add_argument("--embedded", action="store_true",
                        help="the embedded Ray's dashboard, even when clusters are recorded")
    parser.add_argument("--local-ray", dest="embedded", action="store_true",
                        help=argparse.SUPPRESS)   # its old name
    parser.add_argument("-p", "--port", type=int, metavar="PORT",
                        help=f"local port of the forward (default: {dashboard.DEFAULT_PORT} if free, "
                             f"else any free one)")
    parser.add_argument("--no-browser", action="store_true",
                        help="print the URL and a one-time sign-in link; open no browser")
    add_format_argument(parser)


def run(args: argparse.Namespace) -> int:
    from ..reach import pick
    from ..state import State

    port = dashboard.local_port(args.port)
    if args.embedded and args.name:
        raise ClusterError("name a cluster or give --embedded, not both")
    state = State.here()

    def terminated(*_: object) -> None:
        raise Terminated()

    # SIGTERM, and SIGHUP (the terminal closed), unwind like Ctrl-C: the forward is closed.
    before = {number: signal.signal(number, terminated) for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        record = None
        if not args.embedded and (args.name or state.store.list_clusters()):
            record = pick.named_or_only(args.name, state, "dashboard")
        dashboard.show(record, state, port=port, port_asked=args.port is not None,
                       browser=not args.no_browser, progress=info,
                       ready=lambda opened: _tell(opened, args.format))
    except Terminated:
        info("stopped by a signal; closed")
        return 143
    except KeyboardInterrupt:
        info("closed")
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
    return 0


def _tell(opened: dashboard.Opened, form: str) -> None:
    from ..reach.signin import LIFETIME

    if form == "json":
        emit_json(opened.as_dict())
    else:
        print(opened.url)
    sys.stdout.flush()
    info(f"Ray dashboard of {opened.target} at {opened.url}"
         + (" (forwarded to the head)" if opened.forwarded else ""))
    if opened.browser == "opening":
        info("opening your browser with a one-time sign-in link")
    elif opened.browser != "--no-browser":
        info(f"browser {opened.browser}")
    info(f"sign a browser in once with: {opened.sign_in_url}\n"
         f"  (good for one use, for {LIFETIME / 60:.0f} minutes while this runs; without it the "
         f"dashboard asks for the token)")
    info("Ctrl-C to close")
