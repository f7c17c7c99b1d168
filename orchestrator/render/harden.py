"""Harden a Ray cluster config: token auth, no usage stats, a dashboard that is not exposed.

Pure: a dict in, a new dict out. The token itself never enters the config, only the path of the
local file that `ray up` copies to `~/.ray/auth_token` on every node (Ray's default token path,
so `ray status` on a node, the autoscaler and job drivers all find it).

Where the dashboard binds is the provider's policy (`Provider.dashboard_host`): on clouds the
head's loopback, reached through an SSH forward; on `local` the user's choice or the head's
address. The binding chosen is returned with the config, so nobody parses the commands back.
"""
from __future__ import annotations

import copy
import re
import shlex
from dataclasses import dataclass
from typing import Any

from ..providers import Provider
from ..util.ports import is_loopback

REMOTE_TOKEN_PATH = "~/.ray/auth_token"
AUTH_ENV = "export RAY_AUTH_MODE=token; "
DEFAULT_DASHBOARD_PORT = 8265

_RAY_START = re.compile(r"\bray start\b")
_DASHBOARD_HOST = re.compile(r"\s--dashboard-host(?:=|\s+)(\S+)")
_DASHBOARD_PORT = re.compile(r"\s--dashboard-port(?:=|\s+)(\d+)")


@dataclass(frozen=True)
class Dashboard:
    """Where the head's dashboard (and job API) listens, as the start command says."""

    host: str
    port: int = DEFAULT_DASHBOARD_PORT

    @property
    def tunneled(self) -> bool:
        """Only on the head's loopback: reached through an SSH forward."""
        return is_loopback(self.host)


def harden_ray_config(config: dict[str, Any], *, provider: Provider,
                      token_file: str) -> tuple[dict[str, Any], Dashboard]:
    """A copy of `config` that `ray up` can launch with token authentication on, and where its
    dashboard will listen."""
    hardened = copy.deepcopy(config)
    head_default, worker_default = provider.DEFAULT_START
    head = list(hardened.get("head_start_ray_commands") or head_default)
    workers = list(hardened.get("worker_start_ray_commands") or worker_default)
    chosen = _last(_DASHBOARD_HOST, head)
    host = provider.dashboard_host(hardened, chosen)
    rebind = host if host != chosen else None
    hardened["head_start_ray_commands"] = [_harden(c, rebind) for c in head]
    hardened["worker_start_ray_commands"] = [_harden(c, None) for c in workers]
    mounts = dict(hardened.get("file_mounts") or {})
    mounts[REMOTE_TOKEN_PATH] = str(token_file)
    hardened["file_mounts"] = mounts
    port = _last(_DASHBOARD_PORT, head)
    return hardened, Dashboard(host, int(port) if port else DEFAULT_DASHBOARD_PORT)


def _last(pattern: re.Pattern[str], commands: list[str]) -> str | None:
    """The value of the last occurrence of an option in the commands, unquoted."""
    found = [m.group(1) for c in commands for m in pattern.finditer(" " + c)]
    if not found:
        return None
    try:
        words = shlex.split(found[-1])
    except ValueError:
        return found[-1]
    return words[0] if words else found[-1]


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
            part = re.sub(r"\s--dashboard-host(?:=|\s+)\S+", "", part) + \
                f" --dashboard-host={shlex.quote(dashboard_host)}"
        pieces[i] = part + trailing
    return AUTH_ENV + "".join(pieces)
