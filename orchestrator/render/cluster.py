"""ClusterSpec -> the exact Ray cluster config that `ray up` receives.

Pure: the same spec and token path always give the same dict. The token itself never appears,
only the path of the local file holding it (mounted onto every node by Ray's file_mounts).
"""
from __future__ import annotations

import copy
import os
from pathlib import Path

from ..spec.cluster import ClusterSpec


def _absolute(base: Path, value: str) -> str:
    """Relative local paths are relative to the cluster file's folder, not the caller's cwd."""
    expanded = os.path.expanduser(value)
    if os.path.isabs(expanded):
        return value
    return str((base / expanded).resolve())


def render_cluster(spec: ClusterSpec, *, token_file: str) -> dict:
    from ..cluster.secure import harden_ray_config

    config = copy.deepcopy(spec.document)
    base = spec.path.resolve().parent
    mounts = config.get("file_mounts")
    if mounts:
        config["file_mounts"] = {remote: _absolute(base, local) for remote, local in mounts.items()}
    auth = config.get("auth") or {}
    for key in ("ssh_private_key", "ssh_public_key"):
        if key in auth:
            auth[key] = _absolute(base, auth[key])
    return harden_ray_config(config, provider=spec.provider, token_file=token_file)
