"""Hands on a recorded cluster's head: `attach`, `exec`, `rsync-up`, `rsync-down`.

`attach` and the rsyncs are Ray's own `ray attach` / `ray rsync-up` / `ray rsync-down` on the
config `ray up` was given, with the launcher's environment (its node list lives in the
cluster's workspace: `RayLauncher`). `exec` is written by hand: `ray exec` ends with exit code 1
whatever the remote command returned (its command runner turns every failure into one
ClickException), and a script needs the remote code. So `exec` runs the line Ray's command
runner would run (`bash --login -c -i 'source ~/.bashrc; ... && (CMD)'`, inside the container
when the config has `docker:`) over the same ssh options we use elsewhere, and returns ssh's
exit code, which is the remote command's (255: ssh itself failed).
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO, Any

from ..errors import ClusterError
from ..reach.endpoint import rendered
from ..state import UP, ClusterRecord, State
from ..util import ssh
from ..util.processes import dies_with_parent, handing_signals_to

# What `bash -i` says on stderr when it has no terminal; noise to a script, so left out.
_NO_TTY_NOISE = (b"bash: cannot set terminal process group", b"bash: no job control in this shell")


def usable(record: ClusterRecord) -> str:
    """The head's address of a cluster that is up; ClusterError naming its state if not."""
    if record.state != UP:
        raise ClusterError(f"cluster {record.name!r} is {record.state}, not up",
                           hint=f"`orchestrate up {record.file or record.name}` brings it up")
    if not record.head_ip:
        raise ClusterError(f"cluster {record.name!r} has no head address recorded",
                           hint="run `orchestrate up` again")
    return record.head_ip


def command_line(words: Sequence[str]) -> str:
    """One word is a shell command line, as `ray exec` takes it; several are the words of a
    command, each quoted, as `docker exec` or `kubectl exec` take them."""
    return words[0] if len(words) == 1 else shlex.join(words)


def head_line(config: dict[str, Any], command: str, *, tty: bool, in_container: bool = True) -> str:
    """What Ray's command runner runs on the head for `command` (`_with_interactive`, and
    `with_docker_exec` when the cluster runs in a container and `in_container`). The command
    ends on its own line, so a trailing `# comment` cannot swallow the closing parenthesis."""
    inner = f"source ~/.bashrc; export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore && ({command}\n)"
    line = f"bash --login -c -i {shlex.quote(inner)}"
    docker = config.get("docker") or {}
    if docker.get("container_name") and in_container:
        tool = "podman" if docker.get("use_podman") else "docker"
        line = (f"{tool} exec {'-it' if tty else '-i'} {shlex.quote(str(docker['container_name']))}"
                f" /bin/bash -c {shlex.quote(line)}")
    return line


def reach_head(record: ClusterRecord, state: State) -> tuple[str, dict[str, Any], list[str]]:
    """(head address, rendered config, `ssh ... user@head`) of a cluster that is up and whose
    head answers SSH now; ClusterError naming the head and why not."""
    head = usable(record)
    config = rendered(record, state)
    auth = config.get("auth") or {}
    try:
        ssh.run(auth, head, "true", timeout=20, login_shell=False)
        return head, config, ssh.ssh_command(auth, head)
    except ssh.SshError as exc:
        raise ClusterError(f"cannot reach the head {head} of cluster {record.name!r} over SSH: "
                           f"{exc}", hint=f"`orchestrate status {record.name}` shows its health")\
            from None


def exec_on_head(record: ClusterRecord, state: State, command: str, *,
                 tty: bool | None = None, in_container: bool = True) -> int:
    """Run `command` on the head with this process's stdin/stdout/stderr; its exit code."""
    _, config, argv = reach_head(record, state)
    tty = sys.stdin.isatty() and sys.stdout.isatty() if tty is None else tty
    argv[1:1] = ["-tt"] if tty else ["-T"]
    argv.append(head_line(config, command, tty=tty, in_container=in_container))
    process = subprocess.Popen(argv, stderr=None if tty else subprocess.PIPE,
                               preexec_fn=dies_with_parent())  # noqa: PLW1509 - one C call
    with handing_signals_to(process):
        relay = None
        if process.stderr is not None:
            relay = threading.Thread(target=_relay, args=(process.stderr,), daemon=True)
            relay.start()
        code = process.wait()
        if relay is not None:
            relay.join(5)
    return code


def _relay(source: IO[bytes]) -> None:
    """The command's stderr as bytes (whatever their encoding), less bash's no-TTY noise."""
    sink = sys.stderr.buffer
    for line in source:
        if not line.startswith(_NO_TTY_NOISE):
            sink.write(line)
            sink.flush()


def attach(record: ClusterRecord, state: State, options: list[str]) -> int:
    """`ray attach` (an interactive shell on the head) on this terminal; its exit code."""
    from .launcher import RayLauncher

    usable(record)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise ClusterError("attach needs a terminal (stdin and stdout are not one)",
                           hint=f"run a command instead: orchestrate exec {record.name} -- CMD")
    reach_head(record, state)   # Ray would say only "Command failed: <its ssh command line>"
    return RayLauncher(state, lambda _: None).attach(
        record.name, record.provider, state.store.rendered_path(record.name), options)


def rsync(record: ClusterRecord, state: State, *, down: bool, source: str, target: str,
          all_nodes: bool = False) -> None:
    """`ray rsync-up` / `ray rsync-down`; ClusterError (naming the log) if it fails."""
    from .launcher import RayLauncher

    usable(record)
    if not down and not os.path.exists(os.path.expanduser(source)):
        raise ClusterError(f"no such file or folder here: {source}")
    RayLauncher(state, lambda _: None).rsync(
        record.name, record.provider, state.store.rendered_path(record.name), down=down,
        source=source, target=target, all_nodes=all_nodes)
