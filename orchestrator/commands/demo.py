"""orchestrate demo NAME|FILE: a served model's demo page (`demo: true` in its service file) in a
browser, signed in through a one-time link, until Ctrl-C (the use case: `serving.demo`)."""
from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING

from ..errors import Terminated
from ..output import add_format_argument, emit_json, info

if TYPE_CHECKING:
    from ..serving.demo import Opened


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("service", metavar="NAME|SERVICE.yaml",
                        help="a service served from here, by name or by its file")
    parser.add_argument("--no-browser", action="store_true",
                        help="print the page's URL and a one-time sign-in link; open no browser")
    add_format_argument(parser)


def run(args: argparse.Namespace) -> int:
    from ..serving import demo as serve_demo
    from ..state import State

    state = State.here()
    name = serve_demo.service_name(args.service)

    def terminated(*_: object) -> None:
        raise Terminated()

    # SIGTERM, and SIGHUP (the terminal closed), unwind like Ctrl-C: the link and forward close
    before = {number: signal.signal(number, terminated) for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        serve_demo.show(name, state, browser=not args.no_browser, progress=info,
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


def _tell(opened: Opened, form: str) -> None:
    from ..reach.signin import LIFETIME

    if form == "json":
        emit_json(opened.as_dict())
    else:
        print(opened.url)
    sys.stdout.flush()
    info(f"the demo page of {opened.service} at {opened.url}")
    if opened.browser == "opening":
        info("opening your browser" + (" with a one-time sign-in link" if opened.sign_in_url
                                       else ""))
    elif opened.browser != "--no-browser":
        info(f"browser {opened.browser}")
    if opened.sign_in_url:
        info(f"sign a browser in once with: {opened.sign_in_url}\n"
             f"  (good for one use, for {LIFETIME / 60:.0f} minutes while this runs; without it "
             f"the page answers 401)")
    info("Ctrl-C to close")
