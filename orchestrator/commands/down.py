"""orchestrate down [CLUSTER.yaml | NAME]: tear a cluster down with `ray down` and forget it."""
from __future__ import annotations

from ..errors import ClusterError, OrchestrateError
from ..output import seconds, confirm, info



def add_arguments(parser) -> None:
    parser.add_argument("target", nargs="?", metavar="CLUSTER.yaml|NAME",
                        help="the cluster's YAML file or name (default: the only recorded one)")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--timeout", type=seconds, default=900, metavar="SECONDS",
                        help="stop `ray down` after this long (default: 900)")


def pick(target: str | None):
    from ..cluster import state
    from ..cluster.access import resolve

    if target:
        return resolve(target)
    records = state.list_records()
    if not records:
        raise ClusterError("no cluster is recorded; nothing to tear down")
    if len(records) > 1:
        names = ", ".join(r.name for r in records)
        raise ClusterError(f"{len(records)} clusters are recorded ({names}); say which one",
                           hint="orchestrate down NAME")
    return records[0]


def run(args) -> int:
    from ..cluster import lifecycle, state

    record = pick(args.target)
    if not confirm(f"Tear down cluster {record.name} ({record.provider}, state {record.state})?",
                   assume_yes=args.yes):
        raise OrchestrateError("cancelled; nothing was changed")
    with state.locked(record.name, action="down"):
        current = state.read_record(record.name) or record
        lifecycle.down(current, progress=info, timeout=args.timeout)
    info(f"cluster {record.name} is down and forgotten")
    return 0
