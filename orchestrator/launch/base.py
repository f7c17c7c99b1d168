"""The `LaunchBackend` Protocol: how a cluster comes up, is reached and goes down.

A provider (orchestrator.providers) says what a cloud or on-prem site is and checks it; a launch
backend says how a cluster on it is launched (`launch`, `head_address`, `teardown`, their
`log_path`), reached from this machine (`forward` to a port on the head: the dashboard, Serve's
proxy) and used by hand (`attach`, `exec`, `rsync`). Which backend a cluster has is its
provider's `LAUNCH`; `orchestrator.launch.backend` builds it. Today there is one: `ray_up`
(Ray's cluster launcher, `ray up` over SSH).

The lifecycle methods take the cluster's name, provider and the rendered config's file, since
a `replace` tears down with the recorded provider and launches with the new one; the others
take the record of a cluster that is up.
"""
from __future__ import annotations

import subprocess
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from ..state import ClusterRecord


class LaunchBackend(Protocol):
    @property
    def FORWARD(self) -> str:
        """How `forward` reaches the head, for messages: "an SSH forward"."""

    @property
    def VIA(self) -> str:
        """The same in a word, for tables: "ssh"."""

    @property
    def SHELL_ON_HEAD(self) -> bool:
        """`exec`/`output`/`rsync` work, so orchestrate's head tools (the log archiver) can run
        there; without them the logs are archived through the Job API."""

    # --- up and down (orchestrator.cluster.apply) ---
    def launch(self, name: str, provider: str, config_file: Path, *, restart: bool,
               timeout: float) -> None:
        """Bring the cluster of `config_file` up, or update it in place (`restart` False)."""

    def head_address(self, name: str, provider: str, config_file: Path) -> str:
        """The head's address, once `launch` returned."""

    def teardown(self, name: str, provider: str, config_file: Path, *, timeout: float) -> None:
        """Take the cluster of `config_file` down."""

    def log_path(self, name: str, action: str) -> Path:
        """Where the output of `action` (up, down, rsync) goes."""

    def command(self, action: str, *, in_place: bool = False) -> str:
        """What carries out `action` (up, down), for messages: "`ray up`"."""

    # --- reaching a cluster that is up ---
    def forward(self, record: ClusterRecord, remote_port: int, *, timeout: float,
                local_port: int | None = None, remote_host: str = "127.0.0.1",
                watch: list[subprocess.Popen[str]] | None = None) -> AbstractContextManager[int]:
        """A port on this machine's loopback that reaches `remote_host:remote_port` on the head,
        for the length of the block; `watch` gets the process that holds it open."""

    def attach(self, record: ClusterRecord, options: list[str]) -> int:
        """An interactive shell on the head on this terminal; its exit code."""

    def exec(self, record: ClusterRecord, command: str, *, tty: bool | None = None,
             in_container: bool = True) -> int:
        """`command` on the head with this process's stdin/stdout/stderr; its exit code."""

    def output(self, record: ClusterRecord, command: str, *, timeout: float) -> str:
        """What `command` printed on the head (no login shell, no terminal: cheap); ClusterError
        if the head cannot be reached or the command failed."""

    def rsync(self, record: ClusterRecord, *, down: bool, source: str, target: str,
              all_nodes: bool = False) -> None:
        """Files from here to the head (or its nodes), or from the head here (`down`)."""
