"""The local provider's node list, mended after an interrupted write.

Ray's local node provider keeps which hosts it started in `$RAY_TMPDIR/ray/cluster-<name>.state`
and rewrites that file in place (`open(path, "w")` then `write`). A Ctrl-C or a timeout that
stops `ray up` between the two leaves the file empty, and every later `ray up` or `ray down` of
the cluster dies on a JSONDecodeError. Ray lacks a fix, so this module writes one by hand:

- before `ray up`, an unreadable list is removed: Ray rebuilds it from the config with every
  host "terminated" and starts them again, as on a first `up`;
- before `ray down`, it is rebuilt with every host of the config "running", since any of them
  may be: `ray down` then stops Ray on the head and marks each host torn down.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml


def state_path(scratch: Path, name: str) -> Path:
    """Where Ray's local provider keeps the node list when RAY_TMPDIR is `scratch`
    (`ray.autoscaler._private.local.config.get_state_path`)."""
    return scratch / "ray" / f"cluster-{name}.state"


def readable(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_text()), dict)
    except (OSError, ValueError):
        return False


def mend(scratch: Path, name: str, config_file: Path, *, for_teardown: bool) -> bool:
    """Make the node list of cluster `name` readable again; True if it had to be mended."""
    path = state_path(scratch, name)
    if not path.exists() or readable(path):
        return False
    if not for_teardown:
        path.unlink()
        return True
    provider: dict[str, Any] = yaml.safe_load(config_file.read_text())["provider"]
    if not provider.get("head_ip"):   # a coordinator hands out the hosts: nothing to list here
        path.unlink()
        return True
    nodes = {ip: {"tags": {"ray-node-type": "worker"}, "state": "running"}
             for ip in provider.get("worker_ips") or []}
    nodes[provider["head_ip"]] = {"tags": {"ray-node-type": "head"}, "state": "running"}
    if provider.get("external_head_ip"):
        nodes[provider["head_ip"]]["external_ip"] = provider["external_head_ip"]
    partial = path.with_name(path.name + ".mending")
    partial.write_text(json.dumps(nodes))
    os.replace(partial, path)
    return True
