"""Cluster YAML -> ClusterSpec: Ray's cluster-launcher dialect, checked strictly.

Order: parse (line-aware) -> removed Ray fields -> JSON schema (Ray's, tightened) -> shorthand
expansion -> the semantic checks Ray's schema skips. Every problem in the file is reported.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .. import providers
from ..errors import Problem, SpecError
from ..util.text import did_you_mean
from ..yamlload import Document, FieldPath, format_path, load_file
from .schema import describe_value, schema_problems
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
    document: dict[str, Any] = field(repr=False)
    source: Document = field(repr=False, compare=False)
    # a path in `document` -> the path the user wrote it at (shorthand groups)
    origins: dict[FieldPath, FieldPath] = field(default_factory=dict, repr=False, compare=False)
    warnings: tuple[Problem, ...] = field(default=(), repr=False, compare=False)

    def line_of(self, path: FieldPath) -> int | None:
        """The line in the user's file where a field of `document` came from."""
        path = tuple(path)
        for length in range(len(path), -1, -1):
            origin = self.origins.get(path[:length])
            if origin is not None:
                return self.source.line_of(origin + path[length:])
        return self.source.line_of(path)

    def problem(self, path: FieldPath, message: str, hint: str | None = None) -> Problem:
        return Problem(str(self.path), message, self.line_of(path), None, format_path(path), hint)


def is_cluster_document(data: dict[str, Any]) -> bool:
    return "provider" in data or "cluster_name" in data


def _removed_fields(doc: Document) -> list[Problem]:
    provider = doc.data.get("provider")
    kind = provider.get("type") if isinstance(provider, dict) else None
    known = kind if isinstance(kind, str) and kind in providers.PROVIDERS else None
    kept = providers.PROVIDERS[known].LEGACY_KEYS if known else ()  # the schema reports others
    return [doc.problem((key,), f"'{key}' was removed from Ray's cluster YAML", hint)
            for key, hint in REMOVED_FIELDS.items() if key in doc.data and key not in kept]


# Keys of `provider` that every provider type may hold; each provider module lists its own in
# KEYS (ray/autoscaler/_private/<provider>/). Ray ignores unknown keys, so a misspelt one
# silently does nothing: close misspellings of a known key get a warning.
COMMON_PROVIDER_KEYS = ("type", "module", "use_internal_ips", "cache_stopped_nodes",
                        "disable_node_updaters", "disable_launch_config_check", "namespace")


def known_provider_keys() -> list[str]:
    keys = set(COMMON_PROVIDER_KEYS)
    for provider in providers.PROVIDERS.values():
        keys.update(provider.KEYS)
    return sorted(keys)


def provider_typos(doc: Document, data: dict[str, Any]) -> list[Problem]:
    from dataclasses import replace

    warnings = []
    known = known_provider_keys()
    for key in data.get("provider") or {}:
        hint = None if key in known else did_you_mean(key, known)
        if hint:
            problem = doc.problem(("provider", key), f"'{key}' is not a key Ray reads; it is ignored", hint)
            warnings.append(replace(problem, severity="warning"))
    return warnings


def _provider_problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    """Fields Ray needs from this provider in practice, and the provider's own checks."""
    kind = data["provider"]["type"]
    provider = providers.get(kind)
    missing = [doc.problem(("provider", key), f"missing '{key}', required for provider type {kind}")
               for key in provider.REQUIRED if data["provider"].get(key) in (None, "")]
    return missing + provider.problems(doc, data)


class _ProblemAt(Protocol):
    def __call__(self, path: FieldPath, message: str, hint: str | None = None) -> Problem: ...


def _node_type_problems(spec_doc: dict[str, Any], problem: _ProblemAt) -> list[Problem]:
    problems: list[Problem] = []
    types = spec_doc.get("available_node_types") or {}
    head = spec_doc.get("head_node_type")
    if types and head is None:
        problems.append(problem(("available_node_types",),
                                "available_node_types needs head_node_type to name the head's type"))
    if head is not None and head not in types:
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


def _file_mount_problems(doc: Document, data: dict[str, Any], base: Path) -> list[Problem]:
    problems: list[Problem] = []
    for remote, local in (data.get("file_mounts") or {}).items():
        if not isinstance(local, str) or not local:
            problems.append(doc.problem(("file_mounts", remote),
                                        f"expected a local path, got {describe_value(local)}"))
        elif not (base / Path(local).expanduser()).exists():
            problems.append(doc.problem(("file_mounts", remote), f"local path '{local}' does not exist"))
    return problems


# A POSIX user name: Ray writes ssh_user into `user@host` and, with docker, into shell commands.
_SSH_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def _auth_problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
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
    problems += _provider_problems(doc, data) + _auth_problems(doc, data)
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
