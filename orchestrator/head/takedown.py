"""Take a cluster down from its own head (autostop), with what Ray left there.

    take_down(config, reason, log)

On-prem (the bootstrap config lists `worker_ips`: provider type local): `ray stop` on every
worker over SSH, with the key `ray up` copied to the head (`auth.ssh_private_key`, normally
`~/ray_bootstrap_key.pem`), the config's `auth.ssh_user` and the SSH options Ray's own command
runner uses between nodes; then `ray stop` on the head. The hosts stay; the launcher's record says
up, so the next `up` finds Ray not answering and restarts it.

Clouds: `ray down` with the bootstrap config, run on the head (`head.cloud_down`).
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
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
    auth = config.get("auth") or {}
    key = os.path.expanduser(str(auth.get("ssh_private_key") or "~/ray_bootstrap_key.pem"))
    user = str(auth.get("ssh_user") or os.environ.get("USER") or "root")
    return ["ssh", "-i", key, *SSH_OPTIONS, "-T", f"{user}@{host}", stop_line()]


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


def take_down(config: dict[str, Any], reason: str, log: Log) -> None:
    log(f"taking the cluster down: {reason}")
    provider = config.get("provider") or {}
    if "worker_ips" in provider:   # on-prem: the hosts stay, Ray stops on each
        workers = [str(ip) for ip in provider.get("worker_ips") or []]
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(workers)))) as pool:
            list(pool.map(lambda ip: _run(worker_command(config, ip), f"ray stop on {ip}", log),
                          workers))
        _run([ray_executable(), "stop"], "ray stop on the head", log)
        return
    import importlib

    importlib.import_module(".cloud_down", __package__).down(str(BOOTSTRAP), log)
