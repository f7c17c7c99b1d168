"""Cluster YAML -> ClusterSpec: Ray's cluster-launcher dialect, checked strictly.

Order: parse (line-aware) -> removed Ray fields -> JSON schema (Ray's, tightened) -> shorthand
expansion -> the semantic checks Ray's schema skips. Every problem in the file is reported.
"""
from __future__ import annotations

import copy
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Problem, SpecError
from ..yamlload import Document, load_file
from .providers import PROVIDERS
from .schema import schema_problems
from .shorthand import expand_shorthand

REMOVED_FIELDS = {
    "min_workers": "set min_workers on each entry of available_node_types instead",
    "head_node": "describe the head under available_node_types and name it in head_node_type",
    "worker_nodes": "describe workers under available_node_types (with min_workers/max_workers)",
}


@dataclass(frozen=True)
class ClusterSpec:
    """A validated cluster: `document` is always in Ray's dialect (shorthand expanded)."""

    path: Path
    name: str
    provider: str
    document: dict = field(repr=False)
    source: Document = field(repr=False, compare=False)
    origins: dict = field(default_factory=dict, repr=False, compare=False)
    warnings: tuple = field(default=(), repr=False, compare=False)

    def line_of(self, path: tuple) -> int | None:
        """The line in the user's file where a field of `document` came from."""
        path = tuple(path)
        for length in range(len(path), -1, -1):
            origin = self.origins.get(path[:length])
            if origin is not None:
                return self.source.line_of(origin + path[length:])
        return self.source.line_of(path)

    def problem(self, path: tuple, message: str, hint: str | None = None) -> Problem:
        from ..yamlload import format_path

        return Problem(str(self.path), message, self.line_of(path), None, format_path(path), hint)


def is_cluster_document(data: dict) -> bool:
    return "provider" in data or "cluster_name" in data


def _removed_fields(doc: Document) -> list[Problem]:
    local = isinstance(doc.data.get("provider"), dict) and doc.data["provider"].get("type") == "local"
    problems = []
    for key, hint in REMOVED_FIELDS.items():
        if key not in doc.data:
            continue
        if key == "min_workers" and local:
            # Ray's on-prem provider still reads a top-level min_workers (prepare_local).
            value = doc.data[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                problems.append(doc.problem((key,), "expected an integer >= 0"))
            continue
        problems.append(doc.problem((key,), f"'{key}' was removed from Ray's cluster YAML", hint))
    return problems


# Provider keys Ray's providers read (ray/autoscaler/_private/<provider>/). Ray ignores unknown
# keys, so a misspelt one silently does nothing: close misspellings get a warning.
KNOWN_PROVIDER_KEYS = {
    "type", "module", "region", "availability_zone", "project_id", "location", "resource_group",
    "subscription_id", "head_ip", "worker_ips", "coordinator_address", "external_head_ip",
    "use_internal_ips", "use_external_head_ip", "cache_stopped_nodes", "security_group",
    "aws_credentials", "gcp_credentials", "cloudwatch", "msi_identity_id",
    "msi_identity_principal_id", "subnet_id", "tags", "unique_id", "disable_node_updaters",
    "disable_launch_config_check", "namespace",
}


def provider_typos(doc: Document, data: dict) -> list[Problem]:
    from dataclasses import replace

    from .schema import did_you_mean

    warnings = []
    for key in data.get("provider") or {}:
        hint = None if key in KNOWN_PROVIDER_KEYS else did_you_mean(key, sorted(KNOWN_PROVIDER_KEYS))
        if hint:
            problem = doc.problem(("provider", key), f"'{key}' is not a key Ray reads; it is ignored", hint)
            warnings.append(replace(problem, severity="warning"))
    return warnings


LOCAL_FORBIDDEN = ("available_node_types", "head_node_type", "head", "workers")


def _local_problems(doc: Document, data: dict) -> list[Problem]:
    """Ray's on-prem provider builds its single node type itself and aborts on these."""
    if data["provider"]["type"] != "local":
        return []
    return [doc.problem((key,), f"'{key}' is not supported by the local provider",
                        "its nodes are the hosts in provider.head_ip and provider.worker_ips; "
                        "use min_workers/max_workers at the top level")
            for key in LOCAL_FORBIDDEN if key in data]


def _provider_problems(doc: Document, data: dict) -> list[Problem]:
    provider = data.get("provider", {})
    kind = provider.get("type")
    info = PROVIDERS.get(kind)
    if info is None:
        return []
    problems = [
        doc.problem(("provider", key), f"missing '{key}', required for provider type {kind}")
        for key in info.required
        if provider.get(key) in (None, "")
    ]
    if kind == "gcp":
        region, zone = provider.get("region"), provider.get("availability_zone")
        if region and zone and not str(zone).startswith(f"{region}-"):
            problems.append(doc.problem(
                ("provider", "availability_zone"),
                f"zone '{zone}' is not in region '{region}'",
                f"GCP zones are named after their region, e.g. {region}-a"))
        name = str(data.get("cluster_name", ""))
        if name and (name.lower() != name or "_" in name):
            problems.append(doc.problem(
                ("cluster_name",), f"'{name}' is not a valid GCP resource name",
                "on gcp use lowercase letters, digits and '-'"))
    if kind == "local":
        for key in ("head_ip", "worker_ips"):
            values = provider.get(key)
            values = [values] if isinstance(values, str) else values or []
            for i, host in enumerate(values):
                where = ("provider", key) if key == "head_ip" else ("provider", key, i)
                if not isinstance(host, str) or not _is_host(host):
                    problems.append(doc.problem(where, f"'{host}' is not an IP address or host name"))
    return problems


def _is_host(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    labels = text.split(".")
    return all(label and len(label) <= 63 and label.replace("-", "").isalnum()
               and not label.startswith("-") for label in labels) and len(text) <= 253


def _node_type_problems(spec_doc: dict, problem) -> list[Problem]:
    problems = []
    types = spec_doc.get("available_node_types") or {}
    head = spec_doc.get("head_node_type")
    if types and head is None:
        problems.append(problem(("available_node_types",),
                                "available_node_types needs head_node_type to name the head's type"))
    if head is not None and head not in types:
        from .schema import did_you_mean

        known = ", ".join(types) or "none defined"
        problems.append(problem(("head_node_type",),
                                f"'{head}' is not a node type in available_node_types ({known})",
                                did_you_mean(head, types)))
    total_min = 0
    for name, node in types.items():
        low, high = node.get("min_workers", 0), node.get("max_workers")
        if isinstance(high, int) and isinstance(low, int) and low > high:
            problems.append(problem(("available_node_types", name, "min_workers"),
                                    f"min_workers ({low}) is above max_workers ({high})"))
        if name != head and isinstance(low, int):
            total_min += low
    max_workers = spec_doc.get("max_workers")
    if isinstance(max_workers, int) and total_min > max_workers:
        problems.append(problem(("max_workers",),
                                f"the node types' min_workers add up to {total_min}, "
                                f"above the cluster's max_workers ({max_workers})"))
    return problems


def _file_mount_problems(doc: Document, data: dict, base: Path) -> list[Problem]:
    problems = []
    for remote, local in (data.get("file_mounts") or {}).items():
        if not isinstance(local, str) or not local:
            from .schema import describe_value

            problems.append(doc.problem(("file_mounts", remote),
                                        f"expected a local path, got {describe_value(local)}"))
        elif not (base / Path(local).expanduser()).exists():
            problems.append(doc.problem(("file_mounts", remote), f"local path '{local}' does not exist"))
    return problems


# A POSIX user name: Ray writes ssh_user into `user@host` and, with docker, into shell commands.
_SSH_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def _auth_problems(doc: Document, data: dict) -> list[Problem]:
    user = (data.get("auth") or {}).get("ssh_user")
    if isinstance(user, str) and not _SSH_USER.fullmatch(user):
        return [doc.problem(("auth", "ssh_user"), f"'{user}' is not a valid user name",
                            "letters, digits, '_', '.' and '-', starting with a letter or '_'")]
    return []


def build_cluster(doc: Document, path: Path) -> ClusterSpec:
    """Validate a parsed document and build the spec; raises SpecError with every problem."""
    problems = _removed_fields(doc)
    schema = [p for p in schema_problems(doc, "cluster")
              if p.field not in REMOVED_FIELDS]  # reported above with a better message
    problems += schema
    if schema:
        raise SpecError(problems)
    data = doc.data
    warnings = provider_typos(doc, data)
    problems += _provider_problems(doc, data) + _local_problems(doc, data) + _auth_problems(doc, data)
    if problems:
        raise SpecError(problems)
    expanded, origins, shorthand_problems = expand_shorthand(copy.deepcopy(data), doc)
    problems += shorthand_problems
    spec = ClusterSpec(path=path, name=data["cluster_name"], provider=data["provider"]["type"],
                       document=expanded, source=doc, origins=origins, warnings=tuple(warnings))
    problems += _node_type_problems(expanded, spec.problem)
    problems += _file_mount_problems(doc, data, path.parent)
    if problems:
        problems += warnings
        raise SpecError(sorted(problems, key=lambda p: (p.line or 0, p.field)))
    return spec


def load_cluster(path: str | Path) -> ClusterSpec:
    from .experiment import is_experiment_document

    path = Path(path)
    doc = load_file(path)
    if not is_cluster_document(doc.data) and is_experiment_document(doc.data):
        raise SpecError([Problem(
            str(path), "this is an experiment file, not a cluster file", 1,
            hint="a cluster file has 'cluster_name' and 'provider'; experiments are run with "
                 "`orchestrate run`")])
    return build_cluster(doc, path)
