"""Take a cluster down from its own head (autostop), with what Ray left there.

    take_down(config, reason, log) -> bool     (whether every step succeeded)

On-prem (provider type `local`, as Ray's node provider registry says): `ray stop` on the head
first (so that its autoscaler cannot start Ray again on a worker meanwhile; this process is no
Ray process and survives it: `ray stop` picks its victims by name, Ray's RAY_PROCESSES), then on
every worker over SSH, with the key `ray up` copied to the head (`auth.ssh_private_key`,
normally `~/ray_bootstrap_key.pem`), the config's `auth.ssh_user`, its `auth.ssh_proxy_command`
if any, and the SSH options Ray's own command runner uses between nodes. The workers are the
file's `worker_ips`, or, with a `coordinator_address`, the nodes the coordinator has given this
cluster (Ray's node provider), listed before Ray stops. The hosts stay; the launcher's record
says up, so the next `up` finds Ray not answering and restarts it.

Clouds: Ray's node provider, from the head (`head.cloud_down`).
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BOOTSTRAP = Path.home() / "ray_bootstrap_config.yaml"
# Ray's SSHOptions between nodes (autoscaler/_private/command_runner.py): the head trusts the
# workers' keys as Ray does (it pinned none).
SSH_OPTIONS = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10",
               "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
               "-o", "BatchMode=yes")
TIMEOUT = 120
LIST_TIMEOUT = 60    # the coordinator's answer (Ray's client waits for it without a bound)

Log = Callable[[str], None]


def ray_executable() -> str:
    """The `ray` beside the Python running this (the one that runs Ray), else PATH's."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else "ray"


def stop_line() -> str:
    """`ray stop` as Ray's command runner runs a command on a node: a login shell, so PATH is
    what the start commands saw."""
    inner = "source ~/.bashrc; export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore && (ray stop\n)"
    return f"bash --login -c -i {shlex.quote(inner)}"


def worker_command(config: dict[str, Any], host: str) -> list[str]:
    """The ssh argv (no local shell: each value is one argument; the proxy command is run by
    ssh through the user's shell, as Ray's own runner has it run)."""
    auth = config.get("auth") or {}
    key = os.path.expanduser(str(auth.get("ssh_private_key") or "~/ray_bootstrap_key.pem"))
    user = str(auth.get("ssh_user") or os.environ.get("USER") or "root")
    proxy = auth.get("ssh_proxy_command")
    via = ["-o", f"ProxyCommand={proxy}"] if proxy else []
    return ["ssh", "-i", key, *SSH_OPTIONS, *via, "-T", f"{user}@{host}", stop_line()]


def _run(argv: list[str], what: str, log: Log) -> bool:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log(f"{what}: {exc}")
        return False
    lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    if done.returncode != 0:
        log(f"{what} failed ({done.returncode}): {lines[-1] if lines else 'no output'}")
        return False
    log(f"{what}: done")
    return True


def coordinator_workers(config: dict[str, Any]) -> list[str]:
    """The IPs of the workers the coordinator gave this cluster, through Ray's node provider
    (RuntimeError when it does not answer in LIST_TIMEOUT)."""
    found: list[list[str]] = []
    failed: list[BaseException] = []

    def ask() -> None:
        try:
            from ray.autoscaler._private.providers import _get_node_provider
            from ray.autoscaler.tags import NODE_KIND_WORKER, TAG_RAY_NODE_KIND

            provider = _get_node_provider(config["provider"], str(config.get("cluster_name")),
                                          use_cache=False)
            nodes = provider.non_terminated_nodes({TAG_RAY_NODE_KIND: NODE_KIND_WORKER})
            found.append([str(provider.internal_ip(node)) for node in nodes])
        except Exception as exc:  # noqa: BLE001 - raised below, in the caller's thread
            failed.append(exc)

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    asking.join(LIST_TIMEOUT)
    if failed:
        raise RuntimeError(f"{type(failed[0]).__name__}: {failed[0]}")
    if not found:
        raise RuntimeError(f"no answer in {LIST_TIMEOUT} s")
    return found[0]


def on_prem(config: dict[str, Any], log: Log) -> bool:
    provider = config.get("provider") or {}
    listed = True
    if provider.get("coordinator_address"):
        try:
            workers = coordinator_workers(config)
        except RuntimeError as exc:
            log(f"the coordinator at {provider['coordinator_address']} did not list this "
                f"cluster's workers ({exc}): Ray is stopped on the head only; stop it on the "
                "workers with `orchestrate down`")
            workers, listed = [], False
    else:
        workers = [str(ip) for ip in provider.get("worker_ips") or []]
    failed = [] if _run([ray_executable(), "stop"], "ray stop on the head", log) else ["the head"]
    if workers:
        with ThreadPoolExecutor(max_workers=min(8, len(workers))) as pool:
            done = list(pool.map(
                lambda ip: _run(worker_command(config, ip), f"ray stop on {ip}", log), workers))
        failed += [ip for ip, ok in zip(workers, done, strict=True) if not ok]
    if failed or not listed:
        log("Ray could not be stopped on " + ", ".join(
            failed + ([] if listed else ["the workers (not listed)"])))
        return False
    return True


def is_on_prem(provider: dict[str, Any]) -> bool:
    """Whether Ray's node provider for this `provider:` is its on-prem one (type `local`:
    LocalNodeProvider, or the coordinator's client), asked of Ray's own registry (the head
    has no orchestrator.providers). A provider Ray cannot load here is not on-prem."""
    from ray.autoscaler._private.local.coordinator_node_provider import (
        CoordinatorSenderNodeProvider,
    )
    from ray.autoscaler._private.local.node_provider import LocalNodeProvider
    from ray.autoscaler._private.providers import _get_node_provider_cls

    try:
        found = _get_node_provider_cls(provider)
    except Exception:  # noqa: BLE001 - an unknown type, a cloud SDK this head lacks
        return False
    return isinstance(found, type) and issubclass(
        found, (LocalNodeProvider, CoordinatorSenderNodeProvider))


def take_down(config: dict[str, Any], reason: str, log: Log) -> bool:
    """Whether the cluster was taken down; what failed is logged, last."""
    log(f"taking the cluster down: {reason}")
    if is_on_prem(config.get("provider") or {}):   # the hosts stay, Ray stops on each
        return on_prem(config, log)
    import importlib

    code = importlib.import_module(".cloud_down", __package__).down(str(BOOTSTRAP), log)
    return bool(code == 0)
