"""A cluster's price for `up` and `status`: per hour now (the head and the workers running),
with its workers at min_workers and at max_workers, and a floor of what it cost since `up`.

    running(config, health, since) -> dict      the figures, JSON-ready (None: unknown)
    unknown(reason) -> dict                     the same, all unknown, the reason a warning
    lines(found) -> [str]                       the same for people

List prices from the catalog shipped with the package (`providers.cost`); a price it lacks is
unknown, never guessed.
"""
from __future__ import annotations

import time
from typing import Any

from .health import Health


def _workers(layout: dict[str, Any], head_type: str, health: Health) -> dict[str, int] | None:
    """The workers running now per node type of `layout` (the provider's `price_layout`: Ray's
    default node types when the file names none): as the autoscaler reports them, else, with
    one worker type, every alive node but the head; None when it cannot be told."""
    types = set(layout.get("available_node_types") or {})
    active = health.node_types
    if active and set(active) <= types:
        workers = dict(active)
        if workers.get(head_type):
            workers[head_type] -= 1      # the head is counted once, by the price itself
        return {k: v for k, v in workers.items() if v > 0}
    worker_types = sorted(types - {head_type})
    if len(worker_types) == 1:
        return {worker_types[0]: max(health.nodes_alive - 1, 0)}
    if not worker_types and health.nodes_alive:
        return {head_type: health.nodes_alive - 1} if head_type else None
    return None


def running(config: dict[str, Any], health: Health | None, since: float | None,
            now: float | None = None) -> dict[str, Any]:
    """`now` (None when not up or not told), `at_min`, `at_max` (USD per hour), `since_up` (at
    least: the head and min_workers for the hours since `since`), the catalog's `source` and
    `warnings`."""
    from ..providers import get
    from ..providers.cost import cluster_price

    price = cluster_price(config)
    hourly_now = None
    if health is not None:
        layout = get(str((config.get("provider") or {}).get("type"))).price_layout(config)
        workers = _workers(layout, price.head_type, health)
        hourly_now = price.hourly(workers) if workers is not None else None
    hours = max(((now or time.time()) - since) / 3600, 0.0) if since else None
    floor = price.at_min * hours if price.at_min is not None and hours is not None else None
    return {"now": hourly_now, "at_min": price.at_min, "at_max": price.at_max,
            "since_up": None if floor is None else round(floor, 4),
            "hours_up": None if hours is None else round(hours, 3),
            "source": price.source, "warnings": list(price.warnings), "currency": "USD"}


def unknown(reason: str) -> dict[str, Any]:
    """`running`'s figures when the price cannot be worked out (a config the catalog cannot
    read): every figure unknown, `reason` its one warning."""
    return {"now": None, "at_min": None, "at_max": None, "since_up": None, "hours_up": None,
            "source": "", "warnings": [f"the price could not be worked out: {reason}"],
            "currency": "USD"}


def lines(found: dict[str, Any]) -> list[str]:
    from ..providers.cost import money

    parts = []
    if found.get("now") is not None or found.get("hours_up") is not None:
        parts.append(f"{money(found.get('now'))} now")
    parts.append(f"{money(found.get('at_min'))} at min_workers, "
                 f"{money(found.get('at_max'))} at max_workers")
    out = [f"price: {'; '.join(parts)}" + (f" ({found['source']})" if found.get("source")
                                            else "")]
    if found.get("since_up") is not None:
        out.append(f"cost since up: at least ${found['since_up']:,.2f} over "
                   f"{found['hours_up']:.1f} h (the head and min_workers; workers the "
                   f"autoscaler added are not counted)")
    out += [f"warning: {w}" for w in found.get("warnings") or ()]
    return out
