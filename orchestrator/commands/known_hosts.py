"""orchestrate known-hosts [NAME] [--accept HOST [--fingerprint SHA256:...]]: the host keys
pinned for a cluster; pin a new one on purpose.

Every SSH connection to a cluster's hosts (orchestrate's own and Ray's launcher's) pins the key a
host offers the first time, and refuses a changed one afterwards. After a host was reinstalled or
replaced on purpose, `--accept HOST` logs in to it once and pins the key it offers now instead;
with `--fingerprint` (checked with whoever runs the host), only if it is that one.
"""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..output import add_format_argument

    parser.add_argument("name", nargs="?", metavar="NAME|CLUSTER.yaml",
                        help="the cluster (default: the only one recorded)")
    parser.add_argument("--accept", metavar="HOST",
                        help="pin the key HOST offers now, in place of the one pinned for it")
    parser.add_argument("--fingerprint", metavar="SHA256:...",
                        help="with --accept: pin it only if the offered key has this fingerprint")
    add_format_argument(parser)


def run(args: argparse.Namespace) -> int:
    from ..errors import ClusterError
    from ..launch.ray_up import head, known_hosts
    from ..output import emit_json, print_table
    from ..reach import pick
    from ..state import State

    if args.fingerprint and not args.accept:
        raise ClusterError("--fingerprint goes with --accept HOST",
                           hint="orchestrate known-hosts NAME --accept HOST --fingerprint SHA256:...")
    state = State.here()
    record = pick.named_or_only(args.name, state, "known-hosts")
    if args.accept:
        before, after = known_hosts.accept(state, record.name, head.auth(record, state),
                                           args.accept, args.fingerprint)
        if args.format == "json":
            emit_json({"cluster": record.name, "host": args.accept, "before": before,
                       "pinned": after})
        else:
            print(f"pinned for {args.accept} (cluster {record.name}): {', '.join(after)}"
                  + (f"; was {', '.join(before)}" if before else ""))
        return 0
    keys = known_hosts.keys(state, record.name)
    if args.format == "json":
        emit_json([{"host": host, "type": kind, "fingerprint": print_}
                   for host, kind, print_ in keys])
    elif not keys:
        print(f"no host key pinned for cluster {record.name} yet")
    else:
        print_table(keys, ["HOST", "TYPE", "FINGERPRINT"])
    return 0
