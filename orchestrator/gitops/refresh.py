"""`plan`'s refresh: what is live now, for what the state records. Read-only: each recorded
cluster is checked out into a scratch folder (never this machine's ORCHESTRATE_HOME), its
dashboard asked for its health and its job table, and the folder removed.

    refresh(doc, project_state) -> Live
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..cluster.health import probe
from ..errors import OrchestrateError, StateError
from ..reach.endpoint import open_cluster
from ..reach.target import embedded_endpoint
from ..state import UP, State, home
from ..state.document import StateDoc
from ..state.folder import FolderStore
from ..state.secrets import FileSecrets
from ..util.files import private_folder
from ..util.http import HttpError, get_json
from .checkout import checkout
from .live import ClusterLive, Live
from .store import ProjectState


def _jobs(address: str, token: str | None) -> dict[str, str]:
    rows: Any = get_json(address, "/api/jobs/", token, timeout=10)
    return {str(row.get("submission_id") or row.get("job_id")): str(row.get("status"))
            for row in rows if isinstance(row, dict)} if isinstance(rows, list) else {}


def _cluster(entry: dict[str, Any], ps: ProjectState, scratch: State) -> ClusterLive:
    try:
        record = checkout(entry, ps, scratch)
    except StateError as exc:  # its token is not here: nothing is known about the cluster
        return ClusterLive(None, exc.message, asked=False)
    try:
        with open_cluster(record, scratch, timeout=15) as endpoint:
            health = probe(endpoint)
            try:
                jobs = _jobs(endpoint.address, endpoint.token)
            except HttpError as exc:
                return ClusterLive(health, f"its job table did not answer: {exc}")
            return ClusterLive(health, None, jobs)
    except OrchestrateError as exc:
        return ClusterLive(None, exc.message)


def refresh(doc: StateDoc, ps: ProjectState) -> Live:
    # Beside this machine's own token files (0700), not in /tmp: a refresh killed half way
    # leaves the tokens it fetched no more exposed than `up` leaves its own.
    folder = Path(tempfile.mkdtemp(prefix="refresh-", dir=private_folder(home() / "scratch")))
    try:
        scratch = State(FolderStore(folder), FileSecrets(folder / "secrets"))
        clusters = {name: _cluster(entry, ps, scratch)
                    for name, entry in sorted(doc.entries("cluster").items())
                    if (entry.get("record") or {}).get("state") == UP}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    embedded_jobs = None
    on_embedded = any(not e.get("cluster") for e in doc.entries("experiment").values())
    endpoint = embedded_endpoint(ps.machine) if on_embedded else None  # only when it matters
    if endpoint is not None:
        try:
            embedded_jobs = _jobs(endpoint.address, endpoint.token)
        except HttpError:
            embedded_jobs = None
    return Live(True, clusters, embedded_jobs)
