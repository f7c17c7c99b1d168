"""orchestrate rsync-up|rsync-down [NAME] SOURCE TARGET: copy files to or from the head
(Ray's `ray rsync-up` / `ray rsync-down`)."""
from __future__ import annotations

import argparse

from ..errors import ClusterError
from ..output import info


def add_arguments(parser: argparse.ArgumentParser) -> None:
    up = parser.prog.endswith("rsync-up")
    parser.usage = f"%(prog)s [-h]{' [-A]' if up else ''} [NAME] SOURCE TARGET"
    parser.add_argument("paths", nargs="+", metavar="NAME SOURCE TARGET",
                        help="the cluster (default: the only one recorded), then the paths: "
                             "rsync-up copies a local SOURCE to TARGET on the head, rsync-down "
                             "a SOURCE on the head to a local TARGET")
    if up:   # as Ray's: rsync-down has no --all-nodes
        parser.add_argument("-A", "--all-nodes", action="store_true",
                            help="to every node, not only the head")


def run(args: argparse.Namespace) -> int:
    from ..cluster.remote import rsync
    from ..reach import pick
    from ..state import State

    down = args.command == "rsync-down"
    if len(args.paths) not in (2, 3):
        raise ClusterError(f"expected [NAME] SOURCE TARGET, got {len(args.paths)} words",
                           hint=f"orchestrate {args.command} [NAME] SOURCE TARGET")
    all_nodes = getattr(args, "all_nodes", False)
    name, (source, target) = (args.paths[0] if len(args.paths) == 3 else None), args.paths[-2:]
    state = State.here()
    record = pick.named_or_only(name, state, args.command)
    rsync(record, state, down=down, source=source, target=target, all_nodes=all_nodes)
    where = f"{record.name}:{source} to {target}" if down else f"{source} to {record.name}:{target}"
    info(f"copied {where}" + (" (every node)" if all_nodes else ""))
    return 0
