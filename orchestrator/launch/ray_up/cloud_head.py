"""Which instance is a cloud cluster's head, as the cloud says: the one running with Ray's tags
(`ray-cluster-name`, `ray-node-type=head`), found by Ray's own launcher code (`ray get-head-ip`'s
`get_head_node_ip`) with this machine's credentials, in the location the given config names.

    running_head(config) -> str | None      its address (None: no running head there)
    CloudUnasked                            the cloud could not be asked (credentials, SDK, network)

Asked in this process (Ray's CLI would add seconds of start-up per cluster); what Ray's launcher
prints on the way (its errors go to stdout) is kept out of our output and summed up in the
exception's message.
"""
from __future__ import annotations

import contextlib
import io
import os
import tempfile
from typing import Any

import yaml

from ...errors import ClusterError


class CloudUnasked(ClusterError):
    """The cloud did not answer which instance is the head."""


def where(config: dict[str, Any]) -> str:
    """`AWS us-west-2`, `GCP project p (us-central1)`: where a config's cluster is looked for."""
    from ... import providers

    kind = str((config.get("provider") or {}).get("type"))
    site = providers.RAY_UP.get(kind)
    return site.location(config) if site is not None else kind


def running_head(config: dict[str, Any]) -> str | None:
    """The address Ray's launcher would reach the running head at (its external address, or
    its internal one with `use_internal_ips`); None when the cloud has no such head running."""
    from ray.autoscaler._private.commands import get_head_node_ip

    asked = {"cluster_name": config["cluster_name"], "provider": config["provider"]}
    said = io.StringIO()
    fd, path = tempfile.mkstemp(prefix="head-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w") as file:
            yaml.safe_dump(asked, file)
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            address = get_head_node_ip(path)
    except RuntimeError as exc:
        if "not found" in str(exc):   # _get_running_head_node: no head with the tags
            return None
        raise CloudUnasked(_reason(exc, said.getvalue())) from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any SDK's own errors, Ray's abort
        raise CloudUnasked(_reason(exc, said.getvalue())) from None
    finally:
        os.unlink(path)
    return str(address) if address else None


def _reason(exc: BaseException, said: str) -> str:
    """One line: the exception's own words, else the last thing Ray's launcher printed."""
    kind = type(exc).__name__
    lines = [line.strip() for line in (str(exc).strip() or said).splitlines() if line.strip()]
    first = (lines[0] if str(exc).strip() else lines[-1])[:300] if lines else kind
    return first if kind in first else f"{kind}: {first}"
