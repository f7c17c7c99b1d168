"""Ray's node table, as its state API answers it: which nodes are alive and what they have.
Plain data (no request here): the callers ask with their own Endpoint."""
from __future__ import annotations

from typing import Any

# Ray's node table: its state API lists every node with its state, address and resources. It
# is current the moment a node joins or dies; the autoscaler's load report (`/api/cluster_status`)
# is refreshed every AUTOSCALER_UPDATE_INTERVAL_S (5 s by default), and right after `up` still
# counts only the head (Ray 2.60, measured on a fresh 3-host cluster: 2 CPUs where the node
# table said 6).
NODE_TABLE = "/api/v0/nodes?limit=10000"


def listed(answer: Any) -> list[dict[str, Any]] | None:
    """The nodes of a NODE_TABLE answer (None: not such an answer)."""
    found = (((answer or {}).get("data") or {}).get("result") or {}).get("result") \
        if isinstance(answer, dict) else None
    return [node for node in found if isinstance(node, dict)] if isinstance(found, list) else None


def alive(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [node for node in nodes if node.get("state") == "ALIVE"]


def totals(nodes: list[dict[str, Any]]) -> dict[str, float]:
    """The resources of `nodes` summed, without the one-per-node `node:<address>` markers."""
    found: dict[str, float] = {}
    for node in nodes:
        for name, amount in (node.get("resources_total") or {}).items():
            if isinstance(amount, (int, float)) and not str(name).startswith("node:"):
                found[str(name)] = found.get(str(name), 0.0) + float(amount)
    return found
