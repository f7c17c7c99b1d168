"""Hardening of a Ray cluster config: token auth, no usage stats, a dashboard that is not exposed.

Pure: a dict in, a new dict out. The token itself never enters the config, only the path of the
local file that `ray up` copies to `~/.ray/auth_token` on every node (Ray's default token path,
so `ray status` on a node, the autoscaler and job drivers all find it).
"""
from __future__ import annotations

import copy
import re
import shlex

REMOTE_TOKEN_PATH = "~/.ray/auth_token"
AUTH_ENV = "export RAY_AUTH_MODE=token; "
CLOUD_PROVIDERS = ("aws", "gcp", "azure")

# Ray's own defaults (ray/autoscaler/<provider>/defaults.yaml), used when the config has none:
# the hardening must see the commands to rewrite them.
_DEFAULT_START = {
    "local": (
        ["ray stop", "ulimit -c unlimited; ray start --head --port=6379"
         " --autoscaling-config=~/ray_bootstrap_config.yaml"],
        ["ray stop", "ray start --address=$RAY_HEAD_IP:6379"],
    ),
    "cloud": (
        ["ray stop", "ulimit -n 65536; ray start --head --port=6379 --object-manager-port=8076"
         " --autoscaling-config=~/ray_bootstrap_config.yaml"],
        ["ray stop", "ulimit -n 65536; ray start --address=$RAY_HEAD_IP:6379"
         " --object-manager-port=8076"],
    ),
}

_RAY_START = re.compile(r"\bray start\b")
_DASHBOARD_HOST = re.compile(r"\s--dashboard-host(?:=|\s+)\S+")


def harden_ray_config(config: dict, *, provider: str, token_file: str) -> dict:
    """Return a copy of `config` that `ray up` can launch with token authentication on."""
    hardened = copy.deepcopy(config)
    head_default, worker_default = _DEFAULT_START["local" if provider == "local" else "cloud"]
    head = hardened.get("head_start_ray_commands") or head_default
    workers = hardened.get("worker_start_ray_commands") or worker_default
    if provider in CLOUD_PROVIDERS:
        dashboard_host = "127.0.0.1"   # reached through an SSH forward only
    else:
        dashboard_host = None          # local: keep the user's choice, else the head's address
        if not any(_DASHBOARD_HOST.search(c) for c in head):
            dashboard_host = hardened.get("provider", {}).get("head_ip") or "0.0.0.0"
    hardened["head_start_ray_commands"] = [_harden(c, dashboard_host) for c in head]
    hardened["worker_start_ray_commands"] = [_harden(c, None) for c in workers]
    mounts = dict(hardened.get("file_mounts") or {})
    mounts[REMOTE_TOKEN_PATH] = str(token_file)
    hardened["file_mounts"] = mounts
    return hardened


def _harden(command: str, dashboard_host: str | None) -> str:
    # Statements and their separators alternate; only statements that run `ray start` change.
    pieces = re.split(r"(;|&&|\|\||\n)", command)
    for i in range(0, len(pieces), 2):
        part = pieces[i]
        if not _RAY_START.search(part):
            continue
        trailing = part[len(part.rstrip()):]
        part = part.rstrip()
        if "--disable-usage-stats" not in part:
            part += " --disable-usage-stats"
        if dashboard_host and "--head" in part:
            part = _DASHBOARD_HOST.sub("", part) + \
                f" --dashboard-host={shlex.quote(dashboard_host)}"
        pieces[i] = part + trailing
    return AUTH_ENV + "".join(pieces)
