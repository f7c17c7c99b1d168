"""Local (on-premise) preflight: each host answers on SSH with the configured user and key.

Runs the same `ssh` client and options Ray's command runner uses, in parallel, each attempt
bounded by a short timeout.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

from .base import Checks, CheckResult, OK, WARN

EXTRA = None
TIMEOUT = int(os.environ.get("ORCHESTRATE_SSH_TIMEOUT", "5"))


def credentials() -> CheckResult:
    ssh = shutil.which("ssh")
    if ssh:
        return CheckResult("local ssh", OK, f"ssh client at {ssh}")
    return CheckResult("local ssh", WARN, "no ssh client on PATH", "install openssh-client")


def _ssh(host: str, auth: dict) -> tuple[bool, str]:
    from ..cluster.ssh import ssh_command
    from ..errors import ClusterError

    try:
        command = ssh_command(auth, host, connect_timeout=TIMEOUT) + ["true"]
    except ClusterError as exc:
        return False, exc.message
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT + 5,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False, f"no answer within {TIMEOUT + 5} s"
    except OSError as exc:
        return False, f"could not run ssh: {exc}"
    if done.returncode == 0:
        return True, "answers on SSH"
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return False, lines[-1] if lines else f"ssh exited with {done.returncode}"


def check(spec) -> list[CheckResult]:
    checks = Checks(spec)
    provider = spec.document.get("provider") or {}
    auth = spec.document.get("auth") or {}
    user, key = auth.get("ssh_user"), auth.get("ssh_private_key")
    if not user:
        checks.fail("ssh user", "auth.ssh_user is not set", "set the login user of the hosts", ("auth",))
    if not key:
        checks.fail("ssh key", "auth.ssh_private_key is not set",
                    "set the private key that logs in to every host", ("auth",))
    elif not os.path.isfile(os.path.expanduser(key)):
        checks.fail("ssh key", f"{key} does not exist", "point it at an existing private key",
                    ("auth", "ssh_private_key"))
    if checks.failed:
        return checks.results
    key = os.path.expanduser(key)
    hosts = [(("provider", "head_ip"), provider.get("head_ip"))]
    hosts += [(("provider", "worker_ips", i), ip) for i, ip in enumerate(provider.get("worker_ips") or [])]
    hosts = [(path, ip) for path, ip in hosts if ip]
    if not hosts:
        checks.fail("hosts", "no hosts: provider.head_ip is not set", "set provider.head_ip", ("provider",))
        return checks.results
    if not shutil.which("ssh"):
        checks.fail("ssh", "no ssh client on PATH", "install openssh-client")
        return checks.results
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        answers = list(pool.map(lambda item: _ssh(item[1], auth), hosts))
    for (path, ip), (ok, detail) in zip(hosts, answers):
        if ok:
            checks.ok("ssh", f"{user}@{ip} {detail}", path)
        else:
            checks.fail("ssh", f"{user}@{ip}: {detail}",
                        f"check that sshd runs on {ip}, that {user} exists there and that the "
                        f"public key of {key} is in its authorized_keys", path)
    return checks.results
