"""What a cluster costs per hour, from the price catalog (or, on-prem, the file's host price).

    cluster_price(config) -> ClusterPrice     every node type's price; totals at min and max workers
    ClusterPrice.hourly(workers) -> float | None   head + the given workers per node type
    money(value) -> str                       "$1.23/h", or "unknown"

Pure: it reads the config and the catalog (orchestrator.providers.prices), nothing else. Each
provider prices one node type (`Provider.node_price`) and says which node types its clusters
run (`Provider.price_layout`: Ray's defaults when the file names none). A total that counts a
node type of unknown price is None ("unknown"), never a partial sum.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .base import NodePrice, node_types, worst_case

__all__ = ["ClusterPrice", "NodePrice", "cluster_price", "money"]


@dataclass(frozen=True)
class ClusterPrice:
    head_type: str
    nodes: dict[str, NodePrice]          # every node type of the config
    at_min: float | None                 # head + every type's min_workers
    at_max: float | None                 # head + the worst case under max_workers
    warnings: tuple[str, ...]            # one per unknown price, naming the field path
    source: str                          # the catalog's label, or "prices given in the file"
    basis: str = ""                      # what the prices were read from: equal, same prices

    def hourly(self, workers: Mapping[str, int]) -> float | None:
        """Head + these workers per node type; None if a counted type's price is unknown (or
        a type the config does not have is counted)."""
        head = self.nodes.get(self.head_type)
        if head is None or head.hourly is None:
            return None
        total = head.hourly
        for name, count in workers.items():
            if count <= 0:
                continue
            node = self.nodes.get(name)
            if node is None or node.hourly is None:
                return None
            total += count * node.hourly
        return total


def money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}/h"


def cluster_price(config: dict[str, Any]) -> ClusterPrice:
    """The prices of a validated Ray config (ClusterSpec.document, or a rendered or recorded
    config). The worst case takes the priciest node types first under the worker limits."""
    from . import get  # the provider modules import this one: asked for here, not at import

    provider = get(str((config.get("provider") or {}).get("type")))
    layout = provider.price_layout(config)
    head = str(layout["head_node_type"])
    nodes: dict[str, NodePrice] = {}
    warnings = []
    for name, node_type in node_types(layout):
        nodes[name] = provider.node_price(config, name, node_type)
        warning = provider.price_warning(config, name, node_type)
        if warning:
            defaults = not config.get("available_node_types")
            warnings.append(warning + (" (Ray's default node type: the file names none)"
                                       if defaults else ""))
    minimum = {name: int(node_type.get("min_workers") or 0)
               for name, node_type in node_types(layout)}
    return ClusterPrice(head_type=head, nodes=nodes, at_min=_total(nodes, head, minimum),
                        at_max=_at_max(layout, nodes, head), warnings=tuple(warnings),
                        source=provider.price_source(config), basis=price_basis(config, layout))


def price_basis(config: dict[str, Any], layout: dict[str, Any]) -> str:
    """Everything a cluster's price is read from (the provider section: region and zone; the
    node types and worker limits; the file's host price), as one comparable string: two
    configs with the same basis cost the same, known or not."""
    import json

    from .. import cluster_settings

    return json.dumps({"provider": config.get("provider"), "layout": layout,
                       "host_price": cluster_settings.host_price(config)},
                      sort_keys=True, default=str)


def _total(nodes: dict[str, NodePrice], head: str, workers: dict[str, int]) -> float | None:
    return ClusterPrice(head, nodes, None, None, (), "").hourly(workers)


def _at_max(layout: dict[str, Any], nodes: dict[str, NodePrice], head: str) -> float | None:
    """Workers of the head's own type count only where that type sets max_workers (as
    `worst_case` counts them for quotas)."""
    types = dict(node_types(layout))
    as_workers = {name: node_type for name, node_type in types.items() if name != head}
    head_type = types.get(head) or {}
    if int(head_type.get("max_workers") or 0) > 0:
        as_workers[head] = head_type
    reachable = [name for name, node_type in as_workers.items()
                 if int(node_type.get("max_workers", layout.get("max_workers", 2)) or 0) > 0
                 or int(node_type.get("min_workers") or 0) > 0]
    head_price = nodes[head].hourly if head in nodes else None
    if head_price is None or any(nodes[name].hourly is None for name in reachable):
        return None
    document = {"max_workers": layout.get("max_workers", 2), "available_node_types": as_workers}
    workers = worst_case(document, lambda name, node_type: "all",
                         lambda name, node_type: nodes[name].hourly or 0.0)
    return head_price + workers.get("all", 0.0)
