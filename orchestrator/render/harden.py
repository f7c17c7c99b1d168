"""Harden a Ray cluster config: token auth, no usage stats, a dashboard that is not exposed,
TLS for Ray's gRPC between nodes where the provider knows the nodes' addresses.

Pure: a dict in, a new dict out. The token itself never enters the config, only the path of the
local file that `ray up` copies to `~/.ray/auth_token` on every node (Ray's default token path,
so `ray status` on a node, the autoscaler and job drivers all find it).

Where the dashboard binds is the provider's policy (`Provider.dashboard_host`): the head's
loopback, reached through an SSH forward, on clouds and on-prem alike. The binding chosen is
returned with the config, so nobody parses the commands back.

TLS (`Provider.tls_names` not empty: on-prem): every command that runs `ray start` also exports
RAY_USE_TLS and the paths of the CA, the node's certificate and key in `~/.ray/tls`, which
`ray up` copies from the folder beside the token file (`tls_folder`, filled by
`orchestrator.cluster.tls` at `up`). Ray's processes on a node (GCS, raylet, dashboard and its
agents, workers, job drivers) inherit them from `ray start`. Only paths enter the config.
"""
from __future__ import annotations

import copy
import re
import shlex
from dataclasses import dataclass
from typing import Any

from .. import cluster_settings
from ..providers import Provider
from ..util.ports import is_loopback

REMOTE_TOKEN_PATH = "~/.ray/auth_token"
AUTH_ENV = "export RAY_AUTH_MODE=token; "
DEFAULT_DASHBOARD_PORT = 8265
REMOTE_TLS_DIR = "~/.ray/tls"
# The node folder's files: Ray's gRPC reads these three (ray/_common/tls_utils.py, and its C++
# RayConfig); `env` holds the exports below, for a shell on a node (`source ~/.ray/tls/env`).
TLS_CA, TLS_CERT, TLS_KEY, TLS_ENV_FILE = "ca.crt", "node.crt", "node.key", "env"
TLS_ENV = ("export RAY_USE_TLS=1 RAY_TLS_CA_CERT=$HOME/.ray/tls/ca.crt "
           "RAY_TLS_SERVER_CERT=$HOME/.ray/tls/node.crt "
           "RAY_TLS_SERVER_KEY=$HOME/.ray/tls/node.key; ")

# On a head (a cluster's, the embedded Ray), for Ray's job queue (`run.needs`): a job may wait
# PENDING for its turn without limit (Ray fails one after 15 minutes), and an uploaded
# working_dir package is kept a day for it unless a running job holds it (Ray's default: 10
# minutes, after which a job that waited longer could not start).
QUEUE_SETTINGS = {"RAY_JOB_START_TIMEOUT_SECONDS": str(10 * 365 * 24 * 3600),
                  "RAY_RUNTIME_ENV_TEMPORARY_REFERENCE_EXPIRATION_S": str(24 * 3600)}
QUEUE_ENV = "export " + " ".join(f"{k}={v}" for k, v in QUEUE_SETTINGS.items()) + "; "
# On a head whose cluster file (`profiling: true`) or experiment asks for it: the dashboard
# answers /worker/cpu_profile, /worker/traceback, /memory_profile (Ray 2.60 answers 403
# without it). Read once when the dashboard starts: a change needs Ray restarted on the head.
PROFILING_SETTINGS = {"RAY_DASHBOARD_ENABLE_PROFILING": "1"}
PROFILING_ENV = "export " + " ".join(f"{k}={v}" for k, v in PROFILING_SETTINGS.items()) + "; "

_RAY_START = re.compile(r"(\S*\bray)\s+start\b")   # group 1: the `ray` executable as named
# A node's start fails on a loaded host: its raylet waits a fixed 15 s per port for the
# dashboard agent (Python, importing much) to write its port files, then aborts ("Timed out
# waiting for file .../metrics_agent_port_..."), and `ray start` gives up after its own fixed
# 30 s (ray/_private/node.py). Neither wait is a setting in Ray 2.60. Seen on a 2-core machine
# running six simulated nodes at once: `ray up` then fails, or the autoscaler marks the worker
# update-failed and launches it again minutes later. A failed start is stopped and tried once
# more (the agent's imports are then in the page cache), saying so in the updater's log;
# a host that stays overloaded fails both. `--block` (Ray kept in the foreground) is left alone.
RETRY_NOTE = ("orchestrate: ray start failed; stopping what it started and trying once more "
              "(Ray's node start has fixed waits that a loaded host can miss)")
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


def tls_folder(token_file: str) -> str:
    """Where this machine keeps a cluster's node certificate and key: beside its token file, so
    a project's hash, which replaces the token's path by a mark, stays machine-independent."""
    return f"{token_file}.tls"


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
    tls = bool(provider.tls_names(hardened))
    profiling = cluster_settings.profiling(hardened)
    hardened["head_start_ray_commands"] = [_harden(c, rebind, tls, profiling) for c in head]
    hardened["worker_start_ray_commands"] = [_harden(c, None, tls) for c in workers]
    mounts = dict(hardened.get("file_mounts") or {})
    mounts[REMOTE_TOKEN_PATH] = str(token_file)
    if tls:
        mounts[REMOTE_TLS_DIR] = tls_folder(str(token_file))
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


def _retried(statement: str) -> str:
    """`ray start ...` as `{ ray start ... || { note; ray stop --force; sleep 2; ray start ...; }; }`,
    with the same `ray` executable the statement names."""
    found = _RAY_START.search(statement)
    if found is None or re.search(r"\s--block\b", statement):
        return statement
    lead = statement[:len(statement) - len(statement.lstrip())]
    start = statement.strip()
    ray = found.group(1)
    return (f"{lead}{{ {start} || {{ echo {shlex.quote(RETRY_NOTE)} >&2; "
            f"{ray} stop --force >/dev/null 2>&1; sleep 2; {start}; }}; }}")


def _harden(command: str, dashboard_host: str | None, tls: bool,
            profiling: bool = False) -> str:
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
        pieces[i] = _retried(part) + trailing
    starts = _RAY_START.search(command)
    head = bool(starts) and "--head" in command
    prefix = AUTH_ENV + (TLS_ENV if tls and starts else "") + (QUEUE_ENV if head else "") + \
        (PROFILING_ENV if head and profiling else "")
    return prefix + "".join(pieces)
