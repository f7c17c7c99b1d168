"""Between the shared state and this machine: `ray up`, `ray down` and the job client work on
this machine's State (records, rendered configs, Ray's launcher files, token files), so a cluster
entry is checked out into it before acting, and checked back in after.

    checkout(entry, project_state, machine) -> ClusterRecord   the entry, as this machine's files
    checkin(name, project_state, machine, file) -> Entry       this machine's files, normalised
    ensure_token(name, project_state, entry, machine)          the token from its reference (made
                                                               there for a new cluster), as a 0600 file

Ray's launcher state for on-prem clusters (the `local` provider: which hosts are in use, their
tags) travels with the entry, so the next runner's `ray up --no-restart` sees the head it must
not restart.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import StateError
from ..render.cluster import config_hash
from ..state import UP, ClusterRecord, State, cluster_key
from ..state.document import Entry
from ..state.refs import fingerprint
from ..util.files import atomic_write
from .desired import denormalise, normalise
from .store import ProjectState

LAUNCHER_FILES = "cluster-*.state"   # Ray's LocalNodeProvider state (under RAY_TMPDIR)


def _launcher_files(machine: State, name: str) -> dict[str, str]:
    folder = machine.store.workspace(name) / "launcher"
    return {path.relative_to(folder).as_posix(): path.read_text(errors="replace")
            for path in sorted(folder.rglob(LAUNCHER_FILES)) if path.is_file()}


def _record_fields(record: ClusterRecord) -> dict[str, Any]:
    return {"state": record.state, "head_ip": record.head_ip,
            "dashboard_port": record.dashboard_port, "dashboard_host": record.dashboard_host,
            "message": record.message, "created_at": record.created_at}


def ensure_token(name: str, ps: ProjectState, entry: Entry | None, machine: State, *,
                 create: bool = False) -> Path:
    """The cluster's token at this machine's token file, fetched from where the project keeps
    it; a new cluster gets a new token there (`create`). A runner without it gets an error
    naming the reference."""
    key = cluster_key(name)
    token = ps.tokens.fetch(key)
    known = (entry or {}).get("token") or {}
    if token is None:
        if known or not create:
            ref = known.get("ref") or ps.tokens.ref(key)
            raise StateError(f"cluster {name!r} runs with the token at {ref}, which this "
                             f"machine cannot read", hint=_token_hint(ps, ref))
        # A cluster this machine started before the project knew it keeps its token.
        mine = machine.secrets.path(key)
        running = (mine.read_text().strip() or None) if mine.is_file() else None
        token = ps.tokens.create(key, running)
    elif known.get("fingerprint") and fingerprint(token) != known["fingerprint"]:
        raise StateError(f"the token at {ps.tokens.ref(key)} is not the one cluster {name!r} "
                         f"runs with (fingerprint {fingerprint(token)}, state has "
                         f"{known['fingerprint']})",
                         hint="put the cluster's token back at that reference, or replace the "
                              "cluster")
    return machine.secrets.put(key, token)


def _token_hint(ps: ProjectState, ref: str) -> str:
    if ps.tokens.scheme == "file":
        return ("the project keeps tokens in files on the machine that created the cluster; "
                "share them through `secrets: aws-sm://...` or `env://...` in orchestrate.yaml")
    return f"give this machine access to {ref} (a CI secret, or the cloud role's permissions)"


def checkout(entry: Entry, ps: ProjectState, machine: State) -> ClusterRecord:
    """Write the entry as this machine's record, rendered config, launcher files and token."""
    name = entry["name"]
    token_file = ensure_token(name, ps, entry, machine)
    config = denormalise(entry["config"], ps.project.root, token_file)
    machine.store.write_rendered(name, config)
    fields = entry.get("record") or {}
    record = ClusterRecord(name=name, provider=entry["provider"],
                           file=str(ps.project.root / entry["file"]),
                           config_hash=config_hash(config), **fields)
    if record.state == UP and record.head_ip and not record.tunneled:
        record.address = f"http://{record.head_ip}:{record.dashboard_port}"
    machine.store.write_cluster(record)
    folder = machine.store.workspace(name) / "launcher"
    for relative, text in (entry.get("launcher") or {}).items():
        target = (folder / relative).resolve()
        if folder.resolve() in target.parents:  # never outside the workspace
            atomic_write(target, text, mode=0o600)
    return machine.store.read_cluster(name) or record


def checkin(name: str, ps: ProjectState, machine: State, file: str) -> Entry | None:
    """This machine's record of the cluster as a state entry (None: it is not recorded)."""
    record = machine.store.read_cluster(name)
    if record is None:
        return None
    key = cluster_key(name)
    config = machine.store.read_rendered(name) or {}
    token_file = machine.secrets.path(key)
    token = machine.secrets.read(key) if token_file.exists() else ""
    normalised = normalise(config, ps.project.root, token_file)
    return {"kind": "cluster", "name": name, "file": file, "provider": record.provider,
            "hash": config_hash(normalised), "config": normalised, "record": _record_fields(record),
            "launcher": _launcher_files(machine, name),
            "token": {"ref": ps.tokens.ref(key),
                      "fingerprint": fingerprint(token) if token else None}}
