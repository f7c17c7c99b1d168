"""Between the shared state and this machine: `ray up`, `ray down` and the job client work on
this machine's State (records, rendered configs, Ray's launcher files, token files), so a cluster
entry is checked out into it before acting, and checked back in after.

    checkout(entry, project_state, machine, wanted) -> Checkout    the entry, as this machine's files
    checkin(name, project_state, machine, file, before) -> Entry     this machine's files, normalised
    ensure_token(name, project_state, entry, machine)               the token from its reference (made
                                                                    there for a new cluster), as a 0600 file

State is data, the repository is configuration. Whoever can write the state document (a bucket,
a shared folder) must not choose what runs here: so what is handed to Ray and ssh for a checked
out cluster is the repository's file rendered on this machine (`wanted`: auth and its proxy
command, keys, commands, mounts, docker, the dashboard's binding), with only where the recorded
cluster lives taken from the state (`provider`, the node types' machines; `executable`), checked
as data (a provider orchestrate knows, plain addresses). The state's whole config is kept apart
(`Checkout.recorded`): what the cluster was last handed, for the diff, never run. An entry whose
file is gone is run from the state alone only when the caller says so (`from_state`: apply's
--allow-destructive); `plan` shows what that would run (`planner.what_runs`).

Ray's launcher state for on-prem clusters (the `local` provider: which hosts are in use, their
tags) travels with the entry, so the next runner's `ray up --no-restart` sees the head it must
not restart: only that one file, as JSON of hosts, tags and states (no `external_ip`, which
Ray would ssh to).
"""
from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import providers
from ..errors import StateError
from ..render.cluster import config_hash
from ..state import FAILED, INTERRUPTED, LAUNCHING, STOPPING, UP, ClusterRecord, State, cluster_key
from ..state.document import Entry
from ..state.refs import fingerprint
from ..util.files import atomic_write
from .desired import Desired, denormalise, normalise
from .store import ProjectState
from .vouch import Vouched, head_of

# Where the recorded cluster lives: taken from the state when acting on it (a replace tears the
# old one down where it is); everything else of the config comes from the repository's file.
DATA_FIELDS = ("provider", "head_node_type", "available_node_types")
NODE_TYPE_DATA = ("node_config", "resources", "min_workers", "max_workers", "labels")
STATES = (LAUNCHING, UP, FAILED, INTERRUPTED, STOPPING)
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_TAG = re.compile(r"[A-Za-z0-9_.:/-]{1,128}")


@dataclass(frozen=True)
class Checkout:
    record: ClusterRecord
    recorded: dict[str, Any] | None = field(default=None, repr=False)  # the state's config: data
    vouched: Vouched | None = None   # whose word the head's address was taken on (gitops.vouch)

    def reachable(self) -> ClusterRecord:
        """The record, when its head may be reached; StateError saying why not otherwise."""
        if self.vouched is not None and self.vouched.refused:
            raise StateError(f"cluster {self.record.name!r}: {self.vouched.refused}",
                             hint="orchestrate sends a cluster's token, jobs and secrets only "
                                  "to a head the repository's file, the cloud or a host key "
                                  "pinned here vouches for (docs/security.md)")
        return self.record


LAUNCHER_FILES = "cluster-*.state"   # Ray's LocalNodeProvider state (under RAY_TMPDIR)


def _launcher_files(machine: State, name: str) -> dict[str, str]:
    folder = machine.store.workspace(name) / "launcher"
    return {path.relative_to(folder).as_posix(): path.read_text(errors="replace")
            for path in sorted(folder.rglob(LAUNCHER_FILES)) if path.is_file()}


def _record_fields(record: ClusterRecord) -> dict[str, Any]:
    return {"state": record.state, "head_ip": record.head_ip,
            "dashboard_port": record.dashboard_port, "dashboard_host": record.dashboard_host,
            "message": record.message, "created_at": record.created_at,
            "up_at": record.came_up}


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def plain_host(value: Any, where: str) -> str:
    """`value` if it is an IP address or a host name, nothing ssh or a URL could read as more
    (an option such as `-oProxyCommand=...`, a user, a port, a path); StateError otherwise."""
    text = value if isinstance(value, str) else ""
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    if len(text) <= 253 and _HOSTNAME.fullmatch(text):
        return text
    raise StateError(f"{where}: {value!r} is not an IP address or host name",
                     hint="the state document was damaged or written by someone else: check it "
                          "with `orchestrate state show`, and who may write it")


def _check_provider(config: dict[str, Any], where: str) -> dict[str, Any]:
    provider = config.get("provider")
    if not isinstance(provider, dict) or provider.get("type") not in providers.PROVIDERS \
            or "module" in provider:
        kind = provider.get("type") if isinstance(provider, dict) else provider
        raise StateError(f"{where}: provider {kind!r} is not one orchestrate launches",
                         hint=f"providers: {', '.join(providers.PROVIDERS)}")
    for key in ("head_ip", "external_head_ip"):
        if provider.get(key) is not None:
            plain_host(provider[key], f"{where}: provider.{key}")
    workers = provider.get("worker_ips") or []
    if not isinstance(workers, list):
        raise StateError(f"{where}: provider.worker_ips is not a list")
    for host in workers:
        plain_host(host, f"{where}: provider.worker_ips")
    if provider.get("coordinator_address") is not None:
        host, _, port = str(provider["coordinator_address"]).rpartition(":")
        plain_host(host, f"{where}: provider.coordinator_address")
        if not port.isdigit():
            raise StateError(f"{where}: provider.coordinator_address has no port")
    return provider


def _node_types(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise StateError(f"{where}: available_node_types is not a mapping of node types")
    return {str(name): {k: v for k, v in node.items() if k in NODE_TYPE_DATA}
            for name, node in value.items()}


def executable(recorded: dict[str, Any], wanted: dict[str, Any] | None,
               where: str) -> dict[str, Any]:
    """What Ray and ssh are handed to act on the recorded cluster: the repository's `wanted`
    config (on this machine), with where the cluster lives (DATA_FIELDS) from `recorded`, the
    state's. `wanted` None (the file is gone): the state's own config, its provider checked."""
    _check_provider(recorded, where)
    if wanted is None:
        return recorded
    config = dict(wanted)
    for key in DATA_FIELDS:
        if key in recorded:
            config[key] = recorded[key]
    if "available_node_types" in recorded:
        config["available_node_types"] = _node_types(recorded["available_node_types"], where)
    return config


def _state_head(name: str, entry: Entry) -> str | None:
    head = _mapping(entry.get("record")).get("head_ip")
    return plain_host(head, f"cluster/{name} in the state: record.head_ip") \
        if head is not None else None


def _record(name: str, entry: Entry, recorded: dict[str, Any], wanted: Desired | None,
            root: Path, vouched: Vouched | None) -> ClusterRecord:
    """This machine's record of a checked out cluster: its state, times and message from the
    state (as data); the dashboard's binding from the file; the head address from the file
    (on-prem), else the state's as `vouched` (a cloud's: gitops.vouch)."""
    where = f"cluster/{name} in the state"
    fields = _mapping(entry.get("record"))
    state = fields.get("state") if fields.get("state") in STATES else FAILED
    message = fields.get("message") if isinstance(fields.get("message"), str) else None
    head = _state_head(name, entry)
    if vouched is not None:
        head = vouched.head(head)
    provider = entry.get("provider")
    if provider not in providers.PROVIDERS:
        raise StateError(f"{where}: provider {provider!r} is not one orchestrate launches")
    if wanted is not None:
        assert wanted.rendered is not None
        host, port = wanted.rendered.dashboard.host, wanted.rendered.dashboard.port
        named = providers.named_head(wanted.rendered.provider, wanted.rendered.config)
        if named:  # on-prem: the file names the head; a state's other address is not contacted
            head = named
    else:
        host = str(fields.get("dashboard_host") or "127.0.0.1")
        port = fields["dashboard_port"] if isinstance(fields.get("dashboard_port"), int) \
            else 8265
    record = ClusterRecord(name=name, provider=str(provider), file=str(root / entry["file"]),
                           config_hash=config_hash(recorded), state=str(state), head_ip=head,
                           dashboard_port=int(port), dashboard_host=host, message=message)
    if isinstance(fields.get("created_at"), (int, float)):
        record.created_at = float(fields["created_at"])
    if isinstance(fields.get("up_at"), (int, float)) and not isinstance(fields["up_at"], bool):
        record.up_at = float(fields["up_at"])
    if record.state == UP and record.head_ip and not record.tunneled:
        record.address = f"http://{record.head_ip}:{record.dashboard_port}"
    return record


def _launcher_file(name: str, text: str, config: dict[str, Any]) -> str | None:
    """Ray's LocalNodeProvider state (JSON: host -> tags and state), keeping only hosts of the
    config and plain tags; None if it is not that."""
    try:
        nodes = json.loads(text)
    except ValueError:
        return None
    provider = config.get("provider") or {}
    hosts = {provider.get("head_ip"), *(provider.get("worker_ips") or [])}
    if not isinstance(nodes, dict):
        return None
    kept: dict[str, Any] = {}
    for host, node in nodes.items():
        if host not in hosts or not isinstance(node, dict) or \
                node.get("state") not in ("running", "terminated"):
            continue
        tags = _mapping(node.get("tags"))
        kept[host] = {"tags": {k: v for k, v in tags.items()
                               if isinstance(v, str) and _TAG.fullmatch(k) and len(v) <= 256},
                      "state": node["state"]}
    return json.dumps(kept)


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


def checkout(entry: Entry, ps: ProjectState, machine: State, wanted: Desired | None, *,
             from_state: bool = False) -> Checkout:
    """Write the entry as this machine's record, rendered config, launcher files and token.
    `wanted`: what the cluster's file renders to (None: the file is gone; then only with
    `from_state`, the state's own config is handed to Ray: apply's --allow-destructive)."""
    name = entry["name"]
    if wanted is None and not from_state:
        raise StateError(f"cluster {name!r}: its file {entry.get('file')!r} is not one of the "
                         f"project's files, and orchestrate runs nothing on the state's word "
                         f"alone", hint="`orchestrate plan` shows what its state entry would "
                                        "run; apply the deletion with --allow-destructive")
    if wanted is not None and wanted.name != name:
        raise StateError(f"the state's entry of cluster {wanted.name!r} names cluster {name!r}")
    token_file = ensure_token(name, ps, entry, machine)
    if not isinstance(entry.get("config"), dict):
        raise StateError(f"cluster/{name} in the state has no config")
    recorded = denormalise(entry["config"], ps.project.root, token_file)
    trusted = denormalise(wanted.config, ps.project.root, token_file) \
        if wanted is not None and wanted.config is not None else None
    config = executable(recorded, trusted, f"cluster/{name} in the state")
    vouched = _vouch(name, entry, recorded, trusted, ps.machine)
    machine.store.write_rendered(name, config)
    record = _record(name, entry, recorded, wanted, ps.project.root, vouched)
    machine.store.write_cluster(record)
    folder = machine.store.workspace(name) / "launcher"
    relative = f"ray/cluster-{name}.state"   # local_nodes.state_path: the only file there
    text = _mapping(entry.get("launcher")).get(relative)
    kept = _launcher_file(name, text, config) if isinstance(text, str) else None
    if kept is not None:
        atomic_write(folder / relative, kept, mode=0o600)
    return Checkout(machine.store.read_cluster(name) or record, recorded, vouched)


def _vouch(name: str, entry: Entry, recorded: dict[str, Any], trusted: dict[str, Any] | None,
           machine: State) -> Vouched | None:
    """For a cluster whose file does not name its head (a cloud's, a KubeRay one): whose word
    the state's head address is taken on (None: the file names it, or the state names none)."""
    provider = str(entry.get("provider"))
    if providers.named_head(provider, trusted or recorded):
        return None
    from .. import launch

    state_head = _state_head(name, entry)
    if state_head is None and launch.Feature.HEAD_THROUGH_API not in launch.features(provider):
        return None
    return head_of(name, provider, state_head, recorded, trusted, machine,
                   f"cluster/{name} in the state")


def checkin(name: str, ps: ProjectState, machine: State, file: str,
            before: Entry | None = None) -> Entry | None:
    """This machine's record of the cluster as a state entry (None: it is not recorded). While
    nothing was handed to Ray since `before` was checked out (the record's hash is still its
    config's), the entry keeps `before`'s config and head: what runs here was the file's."""
    record = machine.store.read_cluster(name)
    if record is None:
        return None
    key = cluster_key(name)
    config = machine.store.read_rendered(name) or {}
    token_file = machine.secrets.path(key)
    token = machine.secrets.read(key) if token_file.exists() else ""
    normalised = normalise(config, ps.project.root, token_file)
    fields = _record_fields(record)
    if before is not None and isinstance(before.get("config"), dict) and record.config_hash == \
            config_hash(denormalise(before["config"], ps.project.root, token_file)):
        normalised = before["config"]
        fields["head_ip"] = (before.get("record") or {}).get("head_ip", record.head_ip)
    return {"kind": "cluster", "name": name, "file": file, "provider": record.provider,
            "hash": config_hash(normalised), "config": normalised, "record": fields,
            "launcher": _launcher_files(machine, name),
            "token": {"ref": ps.tokens.ref(key),
                      "fingerprint": fingerprint(token) if token else None}}
