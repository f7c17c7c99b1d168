"""orchestrate attach [NAME]: an interactive shell on the cluster's head (Ray's `ray attach`)."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", metavar="NAME|CLUSTER.yaml",
                        help="the cluster (default: the only one recorded)")
    parser.add_argument("--screen", action="store_true", help="run in screen")
    parser.add_argument("--tmux", action="store_true", help="run in tmux")
    parser.add_argument("-N", "--new", action="store_true", help="force a new screen or tmux")
    parser.add_argument("-p", "--port-forward", type=int, action="append", default=[],
                        metavar="PORT", help="forward this port of the head to the same port "
                                             "here (repeatable)")


def run(args: argparse.Namespace) -> int:
    from ..cluster.remote import attach
    from ..reach import pick
    from ..state import State

    state = State.here()
    options = [flag for flag, wanted in (("--screen", args.screen), ("--tmux", args.tmux),
                                         ("--new", args.new)) if wanted]
    for port in args.port_forward:
        options += ["--port-forward", str(port)]
    return attach(pick.named_or_only(args.name, state, "attach"), state, options)
