"""Host keys pinned on first use, per cluster: `known_hosts` in the cluster's private workspace
(0700, on this machine), used by every SSH connection orchestrate makes to the cluster's hosts
and by Ray's launcher for `up`, `down`, `attach` and `rsync-*`. `down` forgets them (the
workspace goes); `orchestrate known-hosts NAME --accept HOST` pins a new one on purpose.

    path(state, name)              the cluster's known_hosts file (made empty, 0600)
    pinned(auth, state, name)      the auth mapping, with the file for util.ssh
    ssh_folder(state, name)        a folder holding `ssh` for the launcher's PATH (see below)
    accept(state, name, auth, host, expect)   pin what HOST offers now
    forget(state, name)

Ray's launcher runs `ssh` by name (its command runner, and rsync's `-e ssh ...`) with
`StrictHostKeyChecking=no` and `UserKnownHostsFile=/dev/null`. ssh takes the first value of each
option, so the `ssh` put first on the launcher's PATH execs the real one with the pinning
options first, which win. It also moves Ray's ControlPath (`control_folder`).

Not covered: the head's own SSH to workers (Ray's autoscaler on the head, with
~/ray_bootstrap_key.pem and Ray's options): orchestrate runs nothing there.
"""
from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

from ...errors import ClusterError
from ...state import State
from ...util import ssh
from ...util.files import atomic_write

FILE = "known_hosts"
_SOCKET_MAX = 107      # sun_path is 108 bytes with its NUL
_SOCKET_SUFFIX = 58    # "/" + %C (40 hex) + the ".XXXXXXXXXXXXXXXX" ssh adds while it binds


def path(state: State, name: str) -> Path:
    """The cluster's known_hosts (0600, made empty the first time)."""
    file = state.store.workspace(name) / FILE
    if not file.exists():
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.close(fd)
    return file


def pinned(auth: dict[str, Any], state: State, name: str) -> dict[str, Any]:
    """`auth` with the cluster's known_hosts, so `util.ssh` checks every host key against it."""
    return {**auth, ssh.KNOWN_HOSTS: str(path(state, name))}


def forget(state: State, name: str) -> None:
    """Drop the cluster's pinned keys (its nodes are gone: new ones are pinned when first met)."""
    (state.store.workspace(name) / FILE).unlink(missing_ok=True)


def hint(name: str, host: str) -> str:
    return (f"if {host} was reinstalled or replaced on purpose, check the offered fingerprint "
            f"with whoever runs it, then: orchestrate known-hosts {name} --accept {host} "
            f"--fingerprint SHA256:...")


def _real_ssh(exclude: Path) -> str | None:
    folders = [part for part in os.environ.get("PATH", os.defpath).split(os.pathsep)
               if part and Path(part).resolve() != exclude.resolve()]
    return shutil.which("ssh", path=os.pathsep.join(folders))


def control_folder(known_hosts: Path | None = None) -> Path | None:
    """A private folder for ssh's shared connections, short enough for a socket path: Ray's
    own (/tmp/ray_ssh_<hash of the user name>/...) can be made first by another user of the
    machine, who could then swap our master socket for theirs. Like tmux's, it must be ours
    and 0700; None (no sharing) if it is not, or its path is too long.

    With `known_hosts` (a cluster's pinned keys: its path names the cluster and the state
    folder), a folder of that cluster's own inside it, as Ray keeps clusters apart by name: a
    connection opened for one cluster checked that cluster's pins and used its key, and ssh
    runs a shared connection's commands without checking either again."""
    folder = _private(Path(tempfile.gettempdir()) / f"orchestrate-ssh-{os.getuid()}")
    if folder is None or known_hosts is None:
        return folder
    return _private(folder / hashlib.sha256(str(known_hosts).encode()).hexdigest()[:12])


def _private(folder: Path) -> Path | None:
    """`folder`, made 0700 if missing; None unless it is a folder of this user's alone, short
    enough for ssh's sockets in it."""
    if len(str(folder)) + _SOCKET_SUFFIX > _SOCKET_MAX:
        return None
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return folder


def wrapper_script(real_ssh: str, known_hosts: Path, control: Path | None) -> str:
    """The `ssh` the launcher finds first: the real one, with the pinning options first."""
    options = ssh.pinning_options(known_hosts)
    if control is not None and len(str(control)) + _SOCKET_SUFFIX <= _SOCKET_MAX:
        options += ["-o", f"ControlPath={control}/%C"]
    else:  # no private folder for sockets: one connection per command, none shared
        options += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
    return ("#!/bin/sh\n"
            "# Written by orchestrate (orchestrator/launch/ray_up/known_hosts.py): Ray's ssh, with this\n"
            "# cluster's pinned host keys. ssh keeps the first value of an option: these win.\n"
            f"exec {shlex.join([real_ssh, *options])} \"$@\"\n")


def ssh_folder(state: State, name: str) -> Path | None:
    """A folder with the `ssh` for the launcher's PATH (None: no ssh here to wrap)."""
    folder = state.store.workspace(name) / "bin"
    real = _real_ssh(folder)
    if real is None:
        return None
    folder.mkdir(mode=0o700, exist_ok=True)
    pinned = path(state, name)
    script = wrapper_script(real, pinned, control_folder(pinned))
    target = folder / "ssh"
    if not target.is_file() or target.read_text(errors="replace") != script:
        atomic_write(target, script, mode=0o700)
    return folder


def keys(state: State, name: str) -> list[tuple[str, str, str]]:
    """(host, key type, fingerprint) of every key pinned for the cluster."""
    file = state.store.workspace(name) / FILE
    return [(host, ssh.key_name(kind), print_) for host, kind, print_ in ssh.known_keys(file)]


def accept(state: State, name: str, auth: dict[str, Any], host: str,
           expect: str | None = None) -> tuple[list[str], list[str]]:
    """Log in to `host` once, pinning the key it offers now in place of any pinned before
    (only if its fingerprint is `expect`, when given): (keys before, after)."""
    file = path(state, name)
    before = [f"{ssh.key_name(kind)} {print_}" for _, kind, print_ in ssh.known_keys(file, host)]
    with tempfile.TemporaryDirectory(dir=state.store.workspace(name)) as scratch:
        trial = Path(scratch) / FILE
        try:
            ssh.run({**auth, ssh.KNOWN_HOSTS: str(trial)}, host, "true", timeout=30,
                    login_shell=False)
        except ssh.SshError as exc:
            raise ClusterError(f"cannot log in to {host} over SSH: {exc}",
                               hint="nothing was pinned; check the address and auth of "
                                    f"cluster {name!r}") from None
        lines = [line for line in trial.read_text(errors="replace").splitlines() if line.split()]
        offered = [f"{ssh.key_name(kind)} {print_}"
                   for _, kind, print_ in ssh.known_keys(trial, host)]
    if not lines or not offered:
        raise ClusterError(f"{host} answered, but ssh recorded no host key for it",
                           hint="nothing was pinned")
    if expect is not None and not any(key.split()[-1] == expect.strip() for key in offered):
        raise ClusterError(f"{host} offers {', '.join(offered)}, not {expect}",
                           hint="nothing was pinned; someone may be intercepting the connection")
    kept = [line for line in file.read_text(errors="replace").splitlines()
            if not (line.split() and ssh.names_host(line.split()[0], host))]
    atomic_write(file, "\n".join(kept + lines) + "\n", mode=0o600)
    return before, offered
