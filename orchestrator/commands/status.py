"""orchestrate status [NAME]: the recorded clusters and their live health."""
from __future__ import annotations

import argparse
import time
from typing import Any

from ..output import add_format_argument, emit_json, print_table
from ..state import State


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", metavar="NAME|CLUSTER.yaml",
                        help="one cluster (default: all recorded)")
    add_format_argument(parser)


def _resources(live: dict[str, Any]) -> str:
    res = live.get("resources") or {}
    parts = [f"{res[k]:g} {k}" for k in ("CPU", "GPU") if res.get(k)]
    return ", ".join(parts)


def run(args: argparse.Namespace) -> int:
    from ..cluster import health
    from . import pick

    state = State.here()
    records = [pick.cluster(args.name, state)] if args.name else state.store.list_clusters()
    rows = [{**r.as_dict(), "live": health.live(r, state)} for r in records]
    if args.format == "json":
        emit_json(rows)
        return 0
    if not rows:
        print("no clusters recorded")
        return 0
    table = []
    for row in rows:
        live = row["live"]
        nodes = live.get("nodes_alive") if live["reachable"] else "-"
        where = row["address"] or (f"ssh {row['head_ip']}" if row["head_ip"] else "-")
        verdict = "ok" if live["reachable"] else (live.get("error") or "unreachable")
        table.append([row["name"], row["provider"], row["state"], nodes, _resources(live),
                      where, time.strftime("%Y-%m-%d %H:%M", time.localtime(row["updated_at"])),
                      verdict])
    print_table(table, ["NAME", "PROVIDER", "STATE", "NODES", "RESOURCES", "ADDRESS", "UPDATED",
                        "HEALTH"])
    return 0
