"""orchestrate up CLUSTER.yaml: launch (or update) a Ray cluster and record it."""
from __future__ import annotations

import argparse

from ..output import add_format_argument, confirm, emit_json, info, seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="CLUSTER.yaml", help="the cluster YAML file")
    parser.add_argument("-y", "--yes", action="store_true",
                        help="do not ask before restarting Ray on a running cluster")
    parser.add_argument("--skip-preflight", action="store_true",
                        help="do not run the provider checks (credentials, quotas, SSH) first")
    parser.add_argument("--no-wait", action="store_true",
                        help="return once the head is up, without waiting for the workers")
    parser.add_argument("--timeout", type=seconds, default=1800, metavar="SECONDS",
                        help="stop `ray up` after this long (default: 1800)")
    parser.add_argument("--wait-timeout", type=seconds, default=600, metavar="SECONDS",
                        help="how long to wait for the minimum number of nodes (default: 600)")
    add_format_argument(parser)


def run(args: argparse.Namespace) -> int:
    from .. import api
    from ..state import State

    state = State.here()
    done = api.up(args.path, preflight=not args.skip_preflight, wait=not args.no_wait,
                  timeout=args.timeout, wait_timeout=args.wait_timeout, progress=info,
                  state=state, ask=lambda question: confirm(question, assume_yes=args.yes))
    record, result = done.record, done.result
    if args.format == "json":
        emit_json(done.as_dict())
        return 0
    if result.action == "unchanged":
        info(f"cluster {record.name} is up and unchanged; nothing to do")
    else:
        info(f"cluster {record.name} {result.action}")
    if result.health:
        info(f"  nodes alive: {result.health.nodes_alive}")
    if done.price is not None:
        from ..cluster.price import lines

        for line in lines(done.price):
            info(f"  {line}")
    if record.address:
        info(f"  job submission address: {record.address}")
    else:
        from .. import launch

        info(f"  dashboard reached through `orchestrate` commands "
             f"({launch.backend(record, state).FORWARD} at {record.head_ip})")
    return 0
