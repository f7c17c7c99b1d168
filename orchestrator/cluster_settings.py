"""orchestrate's own settings in a cluster file, beside Ray's keys: `autostop`, `archive`,
`host_price_per_hour`, `profiling` and `storage`.

The user writes them at the top level of the cluster file; loading moves them under
`metadata.orchestrate` of the Ray config (`metadata` is the field Ray's schema keeps for its
users and never interprets). So `ray up` accepts the rendered config, a plan sees a change of
them like any other field, and the head reads them from the copy Ray leaves there
(`~/ray_bootstrap_config.yaml`, synced again by `ray up --no-restart`).
"""
from __future__ import annotations

from typing import Any

KEY = "orchestrate"                                        # under Ray's `metadata`
# top-level keys in the user's file
OWN_KEYS = ("autostop", "archive", "host_price_per_hour", "profiling", "storage")


def of(config: dict[str, Any]) -> dict[str, Any]:
    """orchestrate's settings carried in a Ray config (empty when it has none)."""
    found = (config.get("metadata") or {}).get(KEY) or {}
    return dict(found) if isinstance(found, dict) else {}


def autostop(config: dict[str, Any]) -> dict[str, Any] | None:
    """`{idle_minutes, max_uptime_minutes, ignore_ssh_sessions}` as given, or None: no autostop."""
    found = of(config).get("autostop")
    return dict(found) if isinstance(found, dict) and found else None


def archive(config: dict[str, Any]) -> str | None:
    """Where logs go before the cluster goes down (`s3://bucket/prefix`, `file:///folder`)."""
    found = of(config).get("archive")
    return str(found) if found else None


def host_price(config: dict[str, Any]) -> float:
    """An on-prem host's price per hour, in USD (0 unless the file says)."""
    return float(of(config).get("host_price_per_hour") or 0.0)


def profiling(config: dict[str, Any]) -> bool:
    """Whether the head's dashboard answers profiling requests (flame graphs, stacks, memory
    profiles of Ray's processes): Ray refuses them unless its head started with
    RAY_DASHBOARD_ENABLE_PROFILING=1 (`render.harden` exports it)."""
    return of(config).get("profiling") is True


def storage(config: dict[str, Any]) -> str | None:
    """The storage every node of the cluster reaches (`s3://bucket/prefix`, `gs://`,
    `abfss://`, or an absolute path every node mounts): the `run_config.storage_path` of the
    experiments run on it that name none (`render.experiment.resolve_config`)."""
    found = of(config).get("storage")
    return str(found) if found else None
