"""orchestrate up CLUSTER.yaml: launch (or update) a Ray cluster and record it."""
from __future__ import annotations

import argparse
from typing import Any

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
    from pathlib import Path

    from ..cluster.apply import UpOptions, up
    from ..gitops import sync
    from ..language.cluster import load_cluster
    from ..state import State

    spec = load_cluster(args.path, here=True)  # launched from here: its files must be here
    state = State.here()
    options = UpOptions(preflight=not args.skip_preflight, wait=not args.no_wait,
                        timeout=args.timeout, wait_timeout=args.wait_timeout)
    def ask(question: str) -> bool:
        return confirm(question, assume_yes=args.yes)

    project = sync.project_of(Path(args.path))  # a project's file: its shared state follows
    result = sync.up(project, spec, state, options, info, ask) if project else \
        up(spec, state, options, info, ask)
    record = result.record
    found = _price(state, record, result.health)
    if args.format == "json":
        emit_json({"action": result.action, "changes": list(result.plan.changes),
                   "plan": result.plan.as_dict(), **record.as_dict(),
                   "project_file": str(project.file) if project else None,
                   "health": result.health.as_dict() if result.health else None,
                   "price": found})
        return 0
    if result.action == "unchanged":
        info(f"cluster {record.name} is up and unchanged; nothing to do")
    else:
        info(f"cluster {record.name} {result.action}")
    if result.health:
        info(f"  nodes alive: {result.health.nodes_alive}")
    if found is not None:
        from ..cluster.price import lines

        for line in lines(found):
            info(f"  {line}")
    if record.address:
        info(f"  job submission address: {record.address}")
    else:
        from .. import launch

        info(f"  dashboard reached through `orchestrate` commands "
             f"({launch.backend(record, State.here()).FORWARD} at {record.head_ip})")
    return 0


def _price(state: Any, record: Any, health: Any) -> dict[str, Any] | None:
    """The cluster's price now and at min/max workers (None: its config is not recorded). The
    cluster is up by now: a price that cannot be worked out is unknown, with the reason as a
    warning, never an error."""
    from ..cluster.price import running, unknown
    from ..errors import OrchestrateError

    try:
        config = state.store.read_rendered(record.name)
        return running(config, health, record.came_up) if config else None
    except OrchestrateError as exc:
        return unknown(exc.message)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:   # as status's _row
        return unknown(f"{type(exc).__name__}: {exc}")
