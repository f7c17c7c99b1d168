"""Hands on a recorded cluster's head: `attach`, `exec`, `rsync-up`, `rsync-down`, through its
launch backend (`orchestrator.launch.backend`; for `ray up` clusters: Ray's own `ray attach` and
`ray rsync-*` on the config `ray up` was given, and `exec` over ssh with the remote exit code).
Here: what every backend needs first (the cluster is up, a terminal for attach, the source
exists for rsync-up).
"""
from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence

from .. import launch
from ..errors import ClusterError
from ..state import UP, ClusterRecord, State


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


def exec_on_head(record: ClusterRecord, state: State, command: str, *,
                 tty: bool | None = None, in_container: bool = True,
                 container_required: bool = False) -> int:
    """Run `command` on the head with this process's stdin/stdout/stderr; its exit code.
    `container_required`: ClusterError unless the cluster runs Ray in a container (`docker:`)."""
    usable(record)
    if container_required and not ((state.store.read_rendered(record.name) or {})
                                   .get("docker") or {}).get("container_name"):
        raise ClusterError(f"cluster {record.name!r} runs no container (no docker: in its file)",
                           hint="leave --run-env out, or use --run-env host")
    return launch.backend(record, state).exec(record, command, tty=tty,
                                              in_container=in_container)


def attach(record: ClusterRecord, state: State, options: list[str]) -> int:
    """An interactive shell on the head on this terminal; its exit code."""
    usable(record)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise ClusterError("attach needs a terminal (stdin and stdout are not one)",
                           hint=f"run a command instead: orchestrate exec {record.name} -- CMD")
    return launch.backend(record, state).attach(record, options)


def rsync(record: ClusterRecord, state: State, *, down: bool, source: str, target: str,
          all_nodes: bool = False) -> None:
    """Files to or from the head; ClusterError (naming the log) if it fails."""
    usable(record)
    if not down and not os.path.exists(os.path.expanduser(source)):
        raise ClusterError(f"no such file or folder here: {source}")
    launch.backend(record, state).rsync(record, down=down, source=source, target=target,
                                        all_nodes=all_nodes)
