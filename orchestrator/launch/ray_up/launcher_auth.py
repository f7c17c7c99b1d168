"""The auth Ray's bootstrap resolved in the last `ray up` of a cluster, kept for our own SSH.

Where a cluster file names no `auth.ssh_private_key`, Ray's AWS and GCP bootstraps make a key
pair (`ray-autoscaler_<region>` on AWS, written to `~/.ssh/<name>.pem`) and fill its path in; the
file as written (our rendered config) does not say it. `keep` reads it from the config cache
`ray up` leaves in the cluster's scratch folder; `read` gives it to `head.auth`.
"""
from __future__ import annotations

import json
import os
from typing import Any

from ...state import State

# Ray's cache of a bootstrapped config (`_bootstrap_config` in ray/autoscaler/_private/commands.py:
# `<tempfile.gettempdir()>/ray-config-<sha256 of the prepared config>`, JSON with "_version" and
# "config"); our `ray` commands run with TMPDIR in the cluster's scratch folder, so it is there.
CONFIG_CACHE = "ray-config-*"
# What of the resolved `auth` our own SSH needs: who logs in, and with which key (its path; the
# key itself stays where Ray wrote it, ~/.ssh/<key pair>.pem, 0600).
_AUTH_KEYS = ("ssh_user", "ssh_private_key")
FILE = "launcher-auth.json"


def keep(state: State, name: str) -> dict[str, str]:
    """Record, in the cluster's private workspace, the `ssh_user` and `ssh_private_key` (a path,
    never the key) of the config Ray's bootstrap resolved in the last `ray up` (its cache, the
    newest if several); {} and nothing written when there is none (a launch that failed before
    its bootstrap: an earlier record stays)."""
    scratch = state.store.workspace(name) / "launcher"
    caches = sorted(scratch.glob(CONFIG_CACHE), key=lambda path: path.stat().st_mtime)
    if not caches:
        return {}
    try:
        resolved = json.loads(caches[-1].read_text()).get("config") or {}
        auth = resolved.get("auth") or {}
        kept = {key: str(auth[key]) for key in _AUTH_KEYS if isinstance(auth.get(key), str)}
    except (OSError, ValueError, AttributeError):
        return {}
    if kept:
        _write(state, name, kept)
    return kept


def _write(state: State, name: str, kept: dict[str, str]) -> None:
    target = state.store.workspace(name) / FILE
    fd = os.open(target.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w") as out:
        json.dump(kept, out)
    os.replace(target.with_suffix(".tmp"), target)


def read(state: State, name: str) -> dict[str, str]:
    """What `keep` recorded for the cluster ({} if nothing)."""
    try:   # beside the rendered config, in the workspace; a read makes no folder
        data = json.loads((state.store.rendered_path(name).parent / FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {key: data[key] for key in _AUTH_KEYS if isinstance(data, dict)
            and isinstance(data.get(key), str)}


def hand(machine: State, scratch: State, name: str) -> None:
    """What `keep` recorded on this machine, for a scratch checkout of the cluster (a GitOps
    plan's refresh) that reaches the head with this machine's key."""
    kept = read(machine, name)
    if kept:
        _write(scratch, name, kept)


def found(state: State, name: str, config: dict[str, Any]) -> dict[str, str]:
    """For a cluster whose `ray up` this machine never ran (another runner of the project did)
    and whose file names no key: the key file of the running head's key pair, if it is here,
    where Ray's bootstrap writes it (a runner sharing the home of the one that launched it
    has it; one on another machine does not, and cannot log in); recorded as `keep` would.
    {} when the provider says of none (`bootstrap_key`)."""
    from ... import providers

    site = providers.RAY_UP.get(str((config.get("provider") or {}).get("type")))
    path = site.bootstrap_key(config) if site is not None else None
    if path is None:
        return {}
    kept = {"ssh_private_key": path}
    _write(state, name, kept)
    return kept
