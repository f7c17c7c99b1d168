"""The `LaunchBackend` Protocol: how a cluster comes up, is reached and goes down.

A provider (orchestrator.providers) says what a cloud or on-prem site is and checks it; a launch
backend says how a cluster on it is launched (`launch`, `head_address`, `teardown`, their
`log_path`), reached from this machine (`forward` to a port on the head: the dashboard, Serve's
proxy) and used by hand (`attach`, `exec`, `rsync`). Which backend a cluster has is its
provider's `LAUNCH`; `orchestrator.launch.backend` builds it. There are two, each in its own
folder: `ray_up` (Ray's cluster launcher, `ray up` over SSH) and `kuberay` (a RayCluster through
the Kubernetes API).

What a backend can do is its `FEATURES`: code outside `orchestrator/launch/` asks for a Feature
(`launch.features(provider)`), never compares a backend's or a provider's name
(tests/test_layers.py fails on that), as SkyPilot's CloudImplementationFeatures are asked.

The lifecycle methods take the cluster's name, provider and the rendered config's file, since
a `replace` tears down with the recorded provider and launches with the new one; the others
take the record of a cluster that is up.
"""
from __future__ import annotations

import enum
import subprocess
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from ..state import ClusterRecord


class Feature(enum.Enum):
    """What a launch backend can do, asked by the code outside it."""

    # The head is found through an API (a Kubernetes Service and its pods), never dialed at an
    # address the state records. Without it the head is a machine at an address, reached over
    # SSH with pinned host keys and vouched for by a pin or the cloud's word (gitops.vouch).
    HEAD_THROUGH_API = "the head found through an API"
    # A shell on the head: `exec`, `output` and `rsync` work, and orchestrate's own tools run
    # there (the autostop watcher, the log archiver); without it logs are archived through
    # the Job API.
    SHELL_ON_HEAD = "a shell on the head"
    # The cluster is a declarative resource made from the file (a RayCluster): `render` shows
    # the resource, and a plan shows the resource's changed fields.
    RESOURCE = "the cluster is a resource"
    # A run may bring a cluster of its own that goes with it (`own_cluster`: a RayJob).
    JOB_ON_OWN_CLUSTER = "a job on a cluster of its own"
    # A service is a resource of its own (a RayService), not Serve's config PUT to a head.
    SERVICE_RESOURCE = "a service is a resource"


class LaunchBackend(Protocol):
    @property
    def NAME(self) -> str:
        """The backend's name, as providers name it in their `LAUNCH`."""

    @property
    def FEATURES(self) -> frozenset[Feature]:
        """What it can do (above)."""

    @property
    def FORWARD(self) -> str:
        """How `forward` reaches the head, for messages: "an SSH forward"."""

    @property
    def VIA(self) -> str:
        """The same in a word, for tables: "ssh"."""

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

    @staticmethod
    def teardown_words(name: str, config: Mapping[str, Any],
                       record: Mapping[str, Any]) -> list[str]:
        """What taking down a cluster recorded with `config` would do, from the state's record
        alone (data, shown by `plan` before --allow-destructive): one line each."""

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


class JobsOnOwnCluster(Protocol):
    """What a backend with `Feature.JOB_ON_OWN_CLUSTER` does (`launch.jobs_on_own_cluster`):
    a run on a cluster of its own, made for the job and gone after it (KubeRay's RayJob)."""

    def submit_job(self, cluster: str, config: dict[str, Any],
                   manifest: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """Create the job's resource from `manifest` (its cluster file `cluster`'s rendered
        `config`); (False: it existed already, the stored one)."""

    def follow_job(self, config: dict[str, Any], name: str, *,
                   timeout: float | None = None) -> dict[str, Any]:
        """Wait for the job `name` to end; its status."""

