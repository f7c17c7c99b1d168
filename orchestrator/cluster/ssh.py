"""The `ssh` command lines we run ourselves, with the options Ray's command runner uses."""
from __future__ import annotations

import os
import shlex
import subprocess

from ..errors import ClusterError


def ssh_command(auth: dict, host: str, *, connect_timeout: int = 10) -> list[str]:
    """`ssh ... user@host` for the cluster's auth section (key, user, proxy command)."""
    command = [
        "ssh", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
        "-o", "LogLevel=ERROR", "-o", f"ConnectTimeout={connect_timeout}",
        "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
    ]
    key = auth.get("ssh_private_key")
    if key:
        command += ["-i", os.path.expanduser(key)]
    proxy = auth.get("ssh_proxy_command")
    if proxy:
        command += ["-o", f"ProxyCommand={proxy}"]
    user = auth.get("ssh_user", "ubuntu")
    if str(user).startswith("-") or str(host).startswith("-"):  # would be read as an option
        raise ClusterError(f"refusing to ssh to {user}@{host}: neither may start with '-'")
    return command + [f"{user}@{host}"]


def run_remote(auth: dict, host: str, remote: str, *, timeout: int = 30) -> None:
    """Run `remote` in a login shell on `host` (as Ray does, so PATH matches Ray's commands).

    `remote` is one shell command line, quoted here as a whole; any value interpolated into it
    must already be quoted with shlex.quote by the caller.
    """
    command = ssh_command(auth, host, connect_timeout=min(10, timeout)) + [
        f"bash --login -c -i {shlex.quote(remote)}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"{host}: no answer over SSH within {timeout} s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise ClusterError(f"{host}: `{remote}` failed over SSH: "
                           f"{lines[-1] if lines else f'exit code {done.returncode}'}")

