"""`plan`'s refresh: what is live now, for what the state records. Read-only: each recorded
cluster is checked out into a scratch folder (never this machine's ORCHESTRATE_HOME), its
dashboard asked for its health and its job table, and the folder removed.

    refresh(doc, project_state, desired) -> Live

It runs nothing the state supplies: a cluster is reached only as its file in the repository
says (auth, key, proxy command, the dashboard's binding; on-prem, the head's address), the
state giving only a cloud head's address, taken when the cloud or a key this machine pinned
vouches for it (`gitops.vouch`; the machine's pins go into the scratch folder, so ssh checks
them). A cluster whose file is not planned (gone, or left out of a partial plan and not
loadable) is not asked, and neither is an on-prem one whose recorded head is not the one its
file names, nor one whose head nothing vouches for.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from .. import providers
from ..cluster.health import probe
from ..errors import KeyRefused, OrchestrateError, StateError
from ..launch.ray_up import known_hosts, launcher_auth
from ..reach.endpoint import open_cluster
from ..reach.target import embedded_endpoint
from ..state import UP, State, cluster_key, home
from ..state.document import StateDoc
from ..state.folder import FolderStore
from ..state.secrets import FileSecrets
from ..util.files import atomic_write, private_folder
from ..util.http import HttpError, get_json
from .checkout import checkout
from .desired import Desired, from_file
from .live import ClusterLive, Live
from .store import ProjectState
from .vouch import pins


def _jobs(address: str, token: str | None) -> dict[str, str]:
    rows: Any = get_json(address, "/api/jobs/", token, timeout=10)
    return {str(row.get("submission_id") or row.get("job_id")): str(row.get("status"))
            for row in rows if isinstance(row, dict)} if isinstance(rows, list) else {}


def _cluster(entry: dict[str, Any], ps: ProjectState, scratch: State,
             wanted: Desired | None) -> ClusterLive:
    if wanted is None or wanted.rendered is None:
        return ClusterLive(None, f"its file {entry.get('file')!r} is not planned, and "
                                 f"orchestrate reaches a cluster only as its file says",
                           asked=False)
    named = providers.named_head(wanted.rendered.provider, wanted.rendered.config)
    recorded = (entry.get("record") or {}).get("head_ip")
    if named and recorded != named:
        return ClusterLive(None, f"the state says its head is {recorded!r}, its file names "
                                 f"{named!r}", asked=False)
    try:
        _pins(ps.machine, scratch, str(entry.get("name")))
        checked_out = checkout(entry, ps, scratch, wanted)
        record = checked_out.reachable()
    except StateError as exc:  # its token is not here, the entry is not data we take, or
        return ClusterLive(None, exc.message, asked=False)   # nothing vouches for its head
    note = checked_out.vouched.note if checked_out.vouched else None
    try:
        with open_cluster(record, scratch, timeout=15) as endpoint:
            health = probe(endpoint)
            try:
                jobs = _jobs(endpoint.address, endpoint.token)
            except HttpError as exc:
                return ClusterLive(health, f"its job table did not answer: {exc}", note=note)
            return ClusterLive(health, None, jobs, note=note)
    except KeyRefused as exc:   # it runs, but this machine may not log in: not a dead head
        return ClusterLive(None, f"{exc.message} ({exc.hint})", asked=False, note=note)
    except OrchestrateError as exc:
        return ClusterLive(None, exc.message, note=note)


def _pins(machine: State, scratch: State, name: str) -> None:
    """The host keys this machine pinned for the cluster, where the scratch checkout's ssh
    checks them: a head reached before must offer the same key again; and the key pair Ray's
    bootstrap made here for it, when the file names none (launch.ray_up.launcher_auth)."""
    launcher_auth.hand(machine, scratch, name)
    mine = pins(machine, name)
    if mine is not None:
        atomic_write(known_hosts.path(scratch, name), mine.read_text(errors="replace"),
                     mode=0o600)


def _wanted(name: str, entry: dict[str, Any], ps: ProjectState,
            desired: dict[str, Desired]) -> Desired | None:
    """The cluster's file as planned; else (a partial plan) its file loaded, if it is still
    one of the project's and loads."""
    if name in desired:
        return desired[name]
    try:
        return from_file(name, entry.get("file"), ps.project,
                         ps.machine.secrets.path(cluster_key(name)), here=False)
    except OrchestrateError:
        return None


def refresh(doc: StateDoc, ps: ProjectState, desired: dict[str, Desired]) -> Live:
    """`desired`: the planned clusters by name (what their files render to)."""
    # Beside this machine's own token files (0700), not in /tmp: a refresh killed half way
    # leaves the tokens it fetched no more exposed than `up` leaves its own.
    folder = Path(tempfile.mkdtemp(prefix="refresh-", dir=private_folder(home() / "scratch")))
    try:
        scratch = State(FolderStore(folder), FileSecrets(folder / "secrets"))
        clusters = {name: _cluster(entry, ps, scratch, _wanted(name, entry, ps, desired))
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
