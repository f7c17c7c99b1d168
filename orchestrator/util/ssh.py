"""The `ssh` command lines we run ourselves (preflight, port forwards, exec, stopping on-prem
workers), with the options Ray's own SSH command runner uses, so they behave as `ray up` does;
and the host keys pinned per cluster (`orchestrator.launch.ray_up.known_hosts` keeps the file).

With a known-hosts file (the keyword, or `auth[KNOWN_HOSTS]`), a host's key is pinned the first
time it answers and a changed key is refused (`HostKeyChanged`, naming the host and both
fingerprints); without one, as Ray's runner does, nothing is checked: only for connections that
carry nothing (the preflight's `hostname`).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The auth mapping's entry that names the cluster's known-hosts file (never in a file Ray reads:
# Ray's schema refuses unknown auth keys; `known_hosts.pinned` adds it in memory).
KNOWN_HOSTS = "orchestrate_known_hosts"

UNCHECKED = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]


class SshError(Exception):
    """A host did not take our command; the message says why in one line."""


class HostKeyChanged(SshError):
    """The host offered a key other than the one pinned for it."""

    def __init__(self, host: str, known: str, offered: str) -> None:
        self.host, self.known, self.offered = host, known, offered
        super().__init__(f"the host key of {host} has changed: {known} is pinned for it, "
                         f"it now offers {offered} (someone may be intercepting the "
                         f"connection, or the host was reinstalled or replaced)")


def _config_value(value: str) -> str:
    """A path as an ssh_config value: %-tokens escaped, quoted if it has spaces."""
    value = value.replace("%", "%%")
    return f'"{value}"' if " " in value else value


def pinning_options(known_hosts: str | os.PathLike[str]) -> list[str]:
    """Options that pin host keys in `known_hosts`: a new host is accepted and written there, a
    changed key refused. ssh takes the first value of an option, so these win over any given
    after them (Ray's StrictHostKeyChecking=no, UserKnownHostsFile=/dev/null)."""
    return ["-o", "StrictHostKeyChecking=accept-new",
            "-o", f"UserKnownHostsFile={_config_value(os.fspath(known_hosts))}",
            "-o", "GlobalKnownHostsFile=/dev/null",   # this cluster's keys alone count
            "-o", "KnownHostsCommand=none",
            "-o", "HashKnownHosts=no",                # readable: `orchestrate known-hosts`
            "-o", "UpdateHostKeys=no",                # the pinned key changes only on purpose
            "-o", "CheckHostIP=no"]


def ssh_command(auth: Mapping[str, Any], host: str, *, connect_timeout: int = 10,
                known_hosts: str | os.PathLike[str] | None = None) -> list[str]:
    """`ssh ... user@host` for a cluster's `auth` section (key, user, proxy command), checking
    the host's key against `known_hosts` (default: `auth[KNOWN_HOSTS]`) when there is one."""
    pinned = known_hosts if known_hosts is not None else auth.get(KNOWN_HOSTS)
    command = ["ssh", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
               *(pinning_options(pinned) if pinned else UNCHECKED),
               "-o", "LogLevel=ERROR", "-o", f"ConnectTimeout={connect_timeout}",
               "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
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
    it exits 0, HostKeyChanged when the host's key is not the one pinned.

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
        changed = host_key_changed(done.stderr)
        if changed is not None:
            raise changed
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise SshError(lines[-1].strip() if lines else f"ssh exited with {done.returncode}")
    return done.stdout


# --- known-hosts files and what ssh says when a key changed -----------------------------------

def fingerprint(key: str) -> str:
    """`SHA256:...` of a public key's base64 blob, as `ssh-keygen -l` shows it ("" if damaged)."""
    try:
        blob = base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError):
        return ""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def key_name(key_type: str) -> str:
    """`ssh-ed25519` -> `ED25519`, `ecdsa-sha2-nistp256` -> `ECDSA`: the names ssh prints."""
    kind = key_type.removeprefix("ssh-").split("-")[0].upper()
    return {"DSS": "DSA"}.get(kind, kind)


def names_host(patterns: str, host: str) -> bool:
    """Whether a known_hosts line's host field names `host` (plain, `[host]:port`, hashed)."""
    for pattern in patterns.split(","):
        if pattern.startswith("|1|"):
            parts = pattern.split("|")
            try:
                salt, digest = base64.b64decode(parts[2]), base64.b64decode(parts[3])
            except (IndexError, binascii.Error, ValueError):
                continue
            if any(hmac.compare_digest(hmac.new(salt, name.encode(), "sha1").digest(), digest)
                   for name in (host, f"[{host}]:22")):
                return True
        elif pattern == host or re.fullmatch(rf"\[{re.escape(host)}\]:\d+", pattern):
            return True
    return False


def known_keys(known_hosts: str | os.PathLike[str], host: str | None = None) -> list[tuple[str, str, str]]:
    """(host field, key type, fingerprint) of every key in the file (that names `host`)."""
    try:
        text = Path(known_hosts).read_text(errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 3 or words[0].startswith(("#", "@")):
            continue
        if host is None or names_host(words[0], host):
            found.append((words[0], words[1], fingerprint(words[2])))
    return found


_CHANGED_HOST = re.compile(r"Host key for (\S+) has changed")
_OFFERED = re.compile(r"The fingerprint for the (\S+) key sent by the remote host is\s*\n?\s*"
                      r"(SHA256:[A-Za-z0-9+/=]+)")
_OFFENDING = re.compile(r"Offending (\S+) key in (.+):(\d+)\s*$", re.MULTILINE)


def host_key_changed(said: str) -> HostKeyChanged | None:
    """What ssh printed (or Ray's output around it), read for a refused changed host key:
    the host, the key pinned for it (read from the file and line ssh names) and the one it
    offered; None if ssh said no such thing."""
    hosts = _CHANGED_HOST.findall(said)
    offers = _OFFERED.findall(said)
    if not hosts or not offers:
        return None
    host = hosts[-1]
    offered = f"{offers[-1][0]} {offers[-1][1]}"
    known = "another key"
    offending = _OFFENDING.findall(said)
    if offending:
        kind, file, number = offending[-1]
        try:
            line = Path(file).read_text(errors="replace").splitlines()[int(number) - 1].split()
            known = f"{kind} {fingerprint(line[2])}"
        except (OSError, IndexError, ValueError):
            known = f"an {kind} key ({file}:{number})"
    return HostKeyChanged(host, known, offered)
