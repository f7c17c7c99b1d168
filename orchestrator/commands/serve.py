"""orchestrate serve FILE: deploy (or update) a service file's Serve application and wait until
it answers; `orchestrate serve --status [NAME...]`: the services served from here.

The token (`auth: token`, the default) is made on the first deploy and shown that once, with an
example request; `--format json` always carries it (`token`) for scripts. It is kept 0600 in
orchestrate's secrets; only its SHA-256 reaches the cluster.
"""
from __future__ import annotations

import argparse
import shlex

from ..output import add_format_argument, emit_json, info, print_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="*", metavar="FILE | NAME",
                        help="a service file to deploy; with --status, service names")
    parser.add_argument("--status", action="store_true",
                        help="show the services served from here: state, replicas, URL")
    add_format_argument(parser)


def run(args: argparse.Namespace) -> int:
    from ..serving import serve
    from ..state import State

    state = State.here()
    if args.status:
        rows = serve.status(list(args.target), state)
        if args.format == "json":
            emit_json({"services": rows})
        else:
            print_table([[r["name"], r["status"], r["replicas"], r["url"], r.get("cluster") or "embedded"]
                         for r in rows], ["NAME", "STATUS", "REPLICAS", "URL", "CLUSTER"])
        return 0
    if len(args.target) != 1:
        info("orchestrate serve: error: give one service file (or --status [NAME...])")
        return 2  # bad usage, as argparse's own errors
    served = serve.deploy_file(args.target[0], state, info)
    if args.format == "json":
        shown = dict(served.as_dict(), token=serve.token(served.name, state))
        emit_json(shown)
        return 0
    info(f"{served.name}: {served.status} at {served.url}" +
         ("" if served.changed else " (unchanged: nothing deployed)"))
    example = f"curl -X POST {shlex.quote(served.url + '/predict')} -H 'Content-Type: application/json'"
    if served.token:
        info(f"token (shown this once; kept in {served.token_file}):\n  {served.token}")
        example += " -H \"Authorization: Bearer $(cat " + shlex.quote(str(served.token_file)) + ")\""
    info(f"try:\n  {example} -d '[{{\"column\": 1.0}}]'")
    if served.demo:
        info(f"a page to try it: {served.demo}; `orchestrate demo {served.name}` opens it signed "
             "in")
    print(served.url)
    return 0
