"""orchestrate status [NAME]: the recorded clusters and their live health, and the embedded Ray
when one is up (a line after the table; `--embedded --format json` gives it to scripts: an
object, or null when none is up; the clusters' JSON list is unchanged)."""
from __future__ import annotations

import argparse
import time
from typing import Any

from ..api import STOPPED
from ..errors import ClusterError
from ..output import add_format_argument, emit_json, print_table
from ..state import State


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", metavar="NAME|CLUSTER.yaml",
                        help="one cluster (default: all recorded)")
    parser.add_argument("--embedded", action="store_true",
                        help="only the embedded Ray: whether it is up, in use, when it stops")
    parser.add_argument("--local-ray", dest="embedded", action="store_true",
                        help=argparse.SUPPRESS)   # its old name, as `stop` and `dashboard` take
    add_format_argument(parser)


def _resources(live: dict[str, Any]) -> str:
    res = live.get("resources") or {}
    parts = [f"{res[k]:g} {k}" for k in ("CPU", "GPU") if res.get(k)]
    return ", ".join(parts)


def _embedded(state: State) -> dict[str, Any] | None:
    from ..reach import watchdog

    return watchdog.report(state.secrets)


def run(args: argparse.Namespace) -> int:
    from .. import api
    from ..reach import idle

    state = State.here()
    if args.embedded:
        if args.name:
            raise ClusterError("name a cluster or give --embedded, not both")
        report = _embedded(state)
        if args.format == "json":
            emit_json(report)
        else:
            print(idle.describe(report) if report else "the embedded Ray is not running")
        return 0
    rows = api.status(args.name or None, state=state)
    if args.format == "json":
        emit_json(rows)
        return 0
    if not rows:
        print("no clusters recorded")
    else:
        _print_clusters(rows)
    report = None if args.name else _embedded(state)
    if report:
        print(idle.describe(report))
    return 0


def _money(price: dict[str, Any] | None, key: str) -> str:
    from ..providers.cost import money

    return "-" if price is None or (key == "now" and price["hours_up"] is None) \
        else money(price.get(key)).removesuffix("/h")


def _via(provider: str) -> str:
    """How the head is reached, in a word (`ssh`, `port-forward`)."""
    from .. import launch

    return launch.backend_type(provider).VIA


def _print_clusters(rows: list[dict[str, Any]]) -> None:
    table = []
    for row in rows:
        live = row["live"]
        nodes = live.get("nodes_alive") if live["reachable"] else "-"
        where = row["address"] or (f"{_via(row['provider'])} {row['head_ip']}"
                                   if row["head_ip"] else "-")
        verdict = "ok" if live["reachable"] else "-" if row["state"] == STOPPED else \
            (live.get("error") or "unreachable")
        price = row.get("price")
        table.append([row["name"], row["provider"], row["state"], nodes, _resources(live),
                      f"{_money(price, 'now')} ({_money(price, 'at_max')})",
                      where, time.strftime("%Y-%m-%d %H:%M", time.localtime(row["updated_at"])),
                      verdict, _autostop(row.get("autostop"))])
    print_table(table, ["NAME", "PROVIDER", "STATE", "NODES", "RESOURCES", "$/H NOW (MAX)",
                        "ADDRESS", "UPDATED", "HEALTH", "AUTOSTOP"])
    sources = sorted({row["price"]["source"] for row in rows
                      if row.get("price") and row["price"].get("source")})
    for row in rows:
        price = row.get("price")
        if price and price.get("since_up") is not None:
            print(f"{row['name']}: cost since up at least ${price['since_up']:,.2f} over "
                  f"{price['hours_up']:.1f} h (the head and min_workers)")
        for warning in (price or {}).get("warnings") or ():
            print(f"{row['name']}: warning: {warning}")
    if sources:
        print("prices: " + "; ".join(sources))


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _autostop(report: dict[str, Any] | None) -> str:
    """`idle 3 min, stops in 27 min (idle)`, `stopped: idle for 30 min`, `takedown failed:
    ... (retrying)`, or `-`."""
    if not report:
        return "-"
    if report.get("error"):
        return f"unknown ({report['error']})"
    if report.get("takedown_error"):
        return f"takedown failed: {report['takedown_error']} (retrying)"
    if report.get("reason"):
        return f"stopped: {report['reason']}"
    parts = []
    if report.get("idle_seconds") is not None:
        parts.append(f"idle {_minutes(report['idle_seconds'])}")
    elif report.get("state") == "watching":
        parts.append("busy")
    if report.get("seconds_left") is not None:
        parts.append(f"stops in {_minutes(report['seconds_left'])} ({report['limit']})")
    return ", ".join(parts) or str(report.get("state") or "-")
