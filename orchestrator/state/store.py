"""What orchestrate remembers, behind two interfaces: `StateStore` (records of clusters, the
configs handed to Ray, jobs and runs; shareable) and `SecretStore` (tokens; never with state).

    ClusterRecord   what we know about one cluster (record.json)
    StateStore      lock, cluster records, rendered configs, jobs, runs, local workspace
    SecretStore     one secret per key (e.g. "clusters/<name>"), kept and read as files

`orchestrator.state.folder.FolderStore` and `orchestrator.state.secrets.FileSecrets` are today's
implementations (one folder under $ORCHESTRATE_HOME); a shared backend implements the same.
"""
from __future__ import annotations

import dataclasses
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from ..util.ports import is_loopback

# Lifecycle states written to a ClusterRecord.
LAUNCHING = "launching"    # `ray up` is (or was, if the run died) in progress
UP = "up"                  # `ray up` succeeded
FAILED = "failed"          # `ray up` failed; nodes may exist, `down` cleans up
INTERRUPTED = "interrupted"  # Ctrl-C or a kill during `up`; nodes may exist
STOPPING = "stopping"      # `ray down` in progress or failed part way


@dataclasses.dataclass
class ClusterRecord:
    name: str
    provider: str
    file: str                      # the user's cluster YAML, absolute
    config_hash: str               # sha256 of the rendered config given to `ray up`
    state: str = LAUNCHING
    head_ip: str | None = None
    dashboard_port: int = 8265
    dashboard_host: str = "0.0.0.0"  # where the dashboard binds on the head
    address: str | None = None     # job-submission address usable from this machine, if direct
    message: str | None = None     # why the last operation failed, for people
    created_at: float = dataclasses.field(default_factory=time.time)
    updated_at: float = dataclasses.field(default_factory=time.time)
    version: str = ""              # orchestrate version that last changed the cluster
    up_at: float | None = None     # when a launch or restart last succeeded (cost since up)

    @property
    def came_up(self) -> float:
        """When the cluster last came up: `up_at`, or for a record written before there was
        one, its last change."""
        return self.up_at if self.up_at is not None else self.updated_at

    @property
    def tunneled(self) -> bool:
        return is_loopback(self.dashboard_host)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class StateStore(Protocol):
    def lock(self, name: str, *, action: str) -> AbstractContextManager[None]:
        """Held by whoever changes cluster `name` (up, down); raises ClusterError("busy")."""

    def read_cluster(self, name: str) -> ClusterRecord | None:
        """None when unknown; ClusterError when the record is damaged."""

    def write_cluster(self, record: ClusterRecord) -> None: ...

    def list_clusters(self) -> list[ClusterRecord]: ...

    def forget_cluster(self, name: str) -> None:
        """Drop everything recorded about the cluster (its secrets are the SecretStore's)."""

    def read_rendered(self, name: str) -> dict[str, Any] | None:
        """The config last handed to `ray up` (None before any); ClusterError if damaged."""

    def write_rendered(self, name: str, config: dict[str, Any]) -> Path:
        """Record the config and return the local file `ray up`/`ray down` read."""

    def rendered_path(self, name: str) -> Path: ...

    def workspace(self, name: str) -> Path:
        """A private local folder for the cluster's logs and Ray's own launcher files."""

    def record_job(self, job_id: str, *, cluster: str | None, experiment: str,
                   name: str) -> None: ...

    def job(self, job_id: str) -> dict[str, Any] | None: ...

    def update_job(self, job_id: str, fields: dict[str, Any]) -> None:
        """Add to a recorded job (its end: status, wall time, error); nothing if unknown."""

    def jobs(self) -> list[dict[str, Any]]:
        """Every job recorded here, newest first."""

    def record_run(self, key: str, summary: dict[str, Any], job_id: str) -> None: ...

    def run(self, key: str) -> dict[str, Any] | None: ...

    def record_service(self, name: str, entry: dict[str, Any]) -> None: ...

    def service(self, name: str) -> dict[str, Any] | None: ...

    def services(self) -> list[dict[str, Any]]: ...

    def forget_service(self, name: str) -> None: ...


class SecretStore(Protocol):
    def ensure(self, key: str) -> Path:
        """The secret's file, made once (a new random token, 0600) and kept for its life."""

    def put(self, key: str, token: str) -> Path:
        """Keep `token` (fetched from where a project keeps it) as the secret's file (0600)."""

    def replace(self, key: str) -> Path:
        """A new random token in the secret's file (0600), whatever was there."""

    def path(self, key: str) -> Path:
        """Where the secret's file is (it may not exist)."""

    def read(self, key: str) -> str:
        """The secret; ClusterError naming the key (never the value) if missing or damaged."""

    def remove(self, key: str) -> None: ...


def service_key(name: str) -> str:
    """The SecretStore key of a service's bearer token."""
    return f"services/{name}"


def demo_key(name: str) -> str:
    """The SecretStore key of a service's demo-page secret (the page's cookie; not the token)."""
    return f"demo-pages/{name}"


def cluster_key(name: str) -> str:
    """The SecretStore key of a cluster's Ray auth token."""
    return f"clusters/{name}"
