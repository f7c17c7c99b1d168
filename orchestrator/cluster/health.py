"""Live health of a cluster, asked of its dashboard with the cluster's token (plain HTTP)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ClusterError
from ..reach.endpoint import Endpoint, open_cluster
from ..state import UP, ClusterRecord, State
from ..util.http import HttpError, get_json
from ..util.nodes import NODE_TABLE, alive, listed, totals


@dataclass(frozen=True)
class Health:
    nodes_alive: int
    nodes_dead: int
    session: str                      # Ray's session name: changes when Ray restarts
    resources: dict[str, float] = field(default_factory=dict)   # totals over the alive nodes
    node_ips: tuple[str, ...] = ()
    # Alive nodes per node type, as Ray's autoscaler reports them (empty: it did not say)
    node_types: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"nodes_alive": self.nodes_alive, "nodes_dead": self.nodes_dead,
                "session": self.session, "resources": self.resources,
                "node_ips": list(self.node_ips), "node_types": self.node_types}


class TokenRefused(ClusterError):
    """The cluster's dashboard refused our token (401/403): asking again is no use, unlike a
    500 or 429 from a head too busy to ask its GCS."""


def _get(endpoint: Endpoint, path: str, timeout: float) -> Any:
    try:
        return get_json(endpoint.address, path, endpoint.token, timeout=timeout)
    except HttpError as exc:
        if exc.status in (401, 403):
            raise TokenRefused(f"the cluster at {endpoint.address} refused our token "
                           f"(HTTP {exc.status})",
                           hint="the recorded token does not match the cluster's") from None
        if exc.status is not None:
            raise ClusterError(f"the cluster at {endpoint.address} answered HTTP "
                               f"{exc.status}") from None
        raise ClusterError(f"the cluster's dashboard at {endpoint.address} does not answer: "
                           f"{exc}") from None


def probe(endpoint: Endpoint, *, timeout: float = 5) -> Health:
    version = _get(endpoint, "/api/version", timeout)
    nodes = listed(_get(endpoint, NODE_TABLE, timeout)) or []
    up = alive(nodes)
    return Health(
        nodes_alive=len(up), nodes_dead=len(nodes) - len(up),
        session=version.get("session_name", ""),
        resources={name: amount for name, amount in totals(up).items()
                   if not name.startswith("accelerator_type")},
        node_ips=tuple(sorted(n.get("node_ip", "") for n in up)),
        node_types=_node_types(endpoint, timeout, len(up)),
    )


def _node_types(endpoint: Endpoint, timeout: float, alive: int) -> dict[str, int]:
    """The alive nodes per node type from the autoscaler's report in `/api/cluster_status`
    (what `ray status` prints as "Active"); empty when there is no report (no autoscaler), or
    when it does not count the `alive` nodes of the node table: it is refreshed every
    AUTOSCALER_UPDATE_INTERVAL_S (5 s), so right after `up` it still counts only the head."""
    try:
        found = get_json(endpoint.address, "/api/cluster_status", endpoint.token,
                         timeout=timeout)
    except HttpError:
        return {}
    report = (((found or {}).get("data") or {}).get("clusterStatus") or {}) \
        .get("autoscalerReport") or {}
    active = report.get("activeNodes") or {}
    counted = {str(k): int(v) for k, v in active.items() if isinstance(v, (int, float))} \
        if isinstance(active, dict) else {}
    return counted if sum(counted.values()) == alive else {}


def probe_cluster(record: ClusterRecord, state: State, *, timeout: float = 15,
                  answer_timeout: float = 5) -> Health:
    """Reach a recorded cluster (an SSH forward on clouds) and probe it; ClusterError if not."""
    with open_cluster(record, state, timeout=timeout) as endpoint:
        return probe(endpoint, timeout=answer_timeout)


def live(record: ClusterRecord, state: State) -> dict[str, Any]:
    """For `status`: whether the cluster answers, and its health, or why not."""
    if record.state != UP:
        return {"reachable": False, "error": record.message}
    try:
        return {"reachable": True, "error": None, **probe_cluster(record, state).as_dict()}
    except ClusterError as exc:
        return {"reachable": False, "error": exc.message}


# What the head's watcher writes every poll (orchestrator/head/autostop.py).
AUTOSTOP_FILE = "~/.orchestrate/autostop.json"


def autostop(record: ClusterRecord, state: State) -> dict[str, Any] | None:
    """For `status`: the head watcher's last word, for a cluster whose file sets autostop (None
    otherwise): how long it has been idle, the time left and which limit ends first, and, once
    it stopped the cluster, why and when. One plain SSH command on the head; read even when Ray
    does not answer (that is when the reason matters)."""
    import json

    from .. import cluster_settings, launch

    if record.state != UP or record.head_ip is None:
        return None
    try:
        config = state.store.read_rendered(record.name) or {}
    except ClusterError:
        return None   # `live` says why already
    if cluster_settings.autostop(config) is None:
        return None
    try:   # the head's clock first: the file's times are on it
        text = launch.backend(record, state).output(
            record, f"date +%s; cat {AUTOSTOP_FILE}", timeout=15)
        clock, _, rest = text.strip().partition("\n")
        head_now = float(clock)
        found = json.loads(rest)
    except ClusterError as exc:
        return _from_archive(record, config) or {"error": exc.message}
    except ValueError:
        return {"error": "the watcher has written nothing yet"}
    return summary(found if isinstance(found, dict) else {}, now=head_now)


def _from_archive(record: ClusterRecord, config: dict[str, Any]) -> dict[str, Any] | None:
    """A cloud head that took its cluster down took its own machine (and the watcher's file)
    with it: why is in the archive it wrote first, when the file names one."""
    from .. import providers
    from .archive import last_stop

    if providers.get(record.provider).FIXED_HOSTS:
        return None   # on-prem the head outlives its cluster: its own file says why
    try:
        stopped = last_stop(record.name, config, since=record.came_up)
    except ClusterError:
        return None
    if stopped is None or stopped["reason"] in ("down",):
        return None
    return {**summary({"state": "stopped",
                       "stopped": {"reason": stopped["reason"], "at": stopped["at"]}}),
            "archive": stopped["archive"]}


# The watcher writes its file every poll (10 s): a file older than this is a watcher that died.
SILENT_AFTER_S = 120.0


def summary(found: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """The watcher's file as `status` shows it; times measured on the head's own clock (`now`:
    the head's time when the file was read, to tell a watcher that stopped writing)."""
    checked, idle_since = found.get("checked_at"), found.get("idle_since")
    stopped = found.get("stopped") or {}
    failed = found.get("state") == "takedown-failed"
    if not stopped and now is not None and isinstance(checked, (int, float)) \
            and now - checked > SILENT_AFTER_S:
        return {"state": "silent", "checked_at": checked, "silent_seconds": round(now - checked),
                "error": f"the watcher has written nothing for {round(now - checked)} s: it "
                         "is not running; `orchestrate up` starts it again"}
    return {
        "state": found.get("state"),
        "idle_seconds": round(checked - idle_since) if isinstance(checked, (int, float))
        and isinstance(idle_since, (int, float)) else None,
        "seconds_left": None if stopped or failed or found.get("seconds_left") is None
        else round(found["seconds_left"]),
        "limit": found.get("limit"),
        "reason": stopped.get("reason"),
        "stopped_at": stopped.get("at"),
        "takedown_error": (found.get("error") or "unknown error") if failed else None,
        "checked_at": checked,
    }
