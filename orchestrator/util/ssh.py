"""The `ssh` command lines we run ourselves (preflight, port forwards, stopping on-prem workers),
with the options Ray's own SSH command runner uses, so they behave as `ray up` does."""
from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping
from typing import Any


class SshError(Exception):
    """A host did not take our command; the message says why in one line."""


def ssh_command(auth: Mapping[str, Any], host: str, *, connect_timeout: int = 10) -> list[str]:
    """`ssh ... user@host` for a cluster's `auth` section (key, user, proxy command)."""
    command = [
        "ssh", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
        "-o", "LogLevel=ERROR", "-o", f"ConnectTimeout={connect_timeout}",
        "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
    ]
    key = auth.get("ssh_private_key")
    if key:
        command += ["-i", os.path.expanduser(str(key))]
    proxy = auth.get("ssh_proxy_command")
    if proxy:
        command += ["-o", f"ProxyCommand={proxy}"]
    user = str(auth.get("ssh_user", "ubuntu"))
    if user.startswith("-") or str(host).startswith("-"):  # would be read as an option
        raise SshError(f"refusing to ssh to {user}@{host}: neither may start with '-'")
    return command + [f"{user}@{host}"]


def run(auth: Mapping[str, Any], host: str, remote: str, *, timeout: float,
        connect_timeout: int | None = None, login_shell: bool = True) -> str:
    """Run `remote` on `host` and return what it printed; raise SshError (one line: why) unless
    it exits 0.

    With `login_shell` it runs in `bash --login -i` as Ray's commands do, so PATH matches
    theirs. `remote` is one command line, quoted here as a whole: any value interpolated into it
    must already be quoted with shlex.quote by the caller.
    """
    if connect_timeout is None:
        connect_timeout = max(1, min(10, int(timeout)))
    command = ssh_command(auth, host, connect_timeout=connect_timeout)
    command.append(f"bash --login -c -i {shlex.quote(remote)}" if login_shell else remote)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SshError(f"no answer over SSH within {timeout:g} s") from None
    except OSError as exc:
        raise SshError(f"could not run ssh: {exc}") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise SshError(lines[-1].strip() if lines else f"ssh exited with {done.returncode}")
    return done.stdout
