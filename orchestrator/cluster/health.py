"""Live health of a cluster, asked of its dashboard with the cluster's token (plain HTTP)."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from ..errors import ClusterError


@dataclass(frozen=True)
class Health:
    nodes_alive: int
    nodes_dead: int
    session: str                      # Ray's session name: changes when Ray restarts
    resources: dict = field(default_factory=dict)   # totals over the alive nodes
    node_ips: tuple = ()

    def as_dict(self) -> dict:
        return {"nodes_alive": self.nodes_alive, "nodes_dead": self.nodes_dead,
                "session": self.session, "resources": self.resources,
                "node_ips": list(self.node_ips)}


def get_json(address: str, path: str, token: str | None, *, timeout: float = 5) -> dict:
    request = urllib.request.Request(address.rstrip("/") + path)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise ClusterError(f"the cluster at {address} refused our token (HTTP {exc.code})",
                               hint="the recorded token does not match the cluster's") from None
        raise ClusterError(f"the cluster at {address} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ClusterError(f"the cluster's dashboard at {address} does not answer: {reason}") \
            from None


def probe(address: str, token: str, *, timeout: float = 5) -> Health:
    version = get_json(address, "/api/version", token, timeout=timeout)
    data = get_json(address, "/api/v0/nodes?limit=10000", token, timeout=timeout)
    nodes = data.get("data", {}).get("result", {}).get("result", [])
    alive = [n for n in nodes if n.get("state") == "ALIVE"]
    totals: dict = {}
    for node in alive:
        for name, amount in (node.get("resources_total") or {}).items():
            if name in ("CPU", "GPU", "memory", "object_store_memory") or \
                    not name.startswith(("node:", "accelerator_type")):
                totals[name] = totals.get(name, 0) + amount
    return Health(
        nodes_alive=len(alive), nodes_dead=len(nodes) - len(alive),
        session=version.get("session_name", ""), resources=totals,
        node_ips=tuple(sorted(n.get("node_ip", "") for n in alive)),
    )
