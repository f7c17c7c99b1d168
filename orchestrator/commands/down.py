"""orchestrate down [CLUSTER.yaml | NAME]: tear a cluster down with `ray down` and forget it."""
from __future__ import annotations

import argparse

from ..errors import OrchestrateError
from ..output import confirm, info, seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", metavar="CLUSTER.yaml|NAME",
                        help="the cluster's YAML file or name (default: the only recorded one)")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--timeout", type=seconds, default=900, metavar="SECONDS",
                        help="stop `ray down` after this long (default: 900)")


def run(args: argparse.Namespace) -> int:
    from .. import api
    from ..reach import pick
    from ..state import State

    state = State.here()
    record = pick.cluster(args.target, state) if args.target else pick.only_cluster(state, "down")
    if not confirm(f"Tear down cluster {record.name} ({record.provider}, state {record.state})?",
                   assume_yes=args.yes):
        raise OrchestrateError("cancelled; nothing was changed")
    done = api.down(record, timeout=args.timeout, progress=info, state=state)
    if done.project is not None:
        info(f"cluster {record.name} is down and forgotten (also in project {done.project}'s "
             f"state)")
    elif done.was_up:
        info(f"cluster {record.name} is down and forgotten")
    else:
        info(f"cluster {record.name} was already down (another command took it down)")
    return 0
