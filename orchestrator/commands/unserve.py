"""orchestrate unserve NAME: remove just that service's Serve application (every other
application keeps running) and forget its token."""
from __future__ import annotations

import argparse

from ..output import add_format_argument, emit_json, info


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="a service's name (orchestrate serve --status)")
    add_format_argument(parser)


def run(args: argparse.Namespace) -> int:
    from ..serving import serve
    from ..state import State

    found = serve.remove(args.name, State.here(), info)
    if args.format == "json":
        emit_json({"name": args.name, "removed": found})
    else:
        info(f"removed {args.name}" if found else
             f"{args.name} is not served from here (orchestrate serve --status lists what is)")
    return 0
