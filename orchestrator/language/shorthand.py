"""The head/workers shorthand, expanded into Ray's `available_node_types`.

    head: {instance_type: m5.2xlarge}
    workers:
      gpu: {instance_type: g5.xlarge, gpus: 1, min_workers: 0, max_workers: 4, spot: true}

becomes node types `head` and `gpu` with each provider's own node_config keys. Plain Ray YAML
(available_node_types) keeps working; the two forms cannot be mixed in one file.
"""
from __future__ import annotations

from typing import Any

from .. import providers
from ..errors import Problem
from ..yamlload import Document, FieldPath

HEAD_TYPE = "head"


def _resources(group: dict[str, Any]) -> dict[str, Any]:
    resources = dict(group.get("resources") or {})
    if "cpus" in group:
        resources["CPU"] = group["cpus"]
    if "gpus" in group:
        resources["GPU"] = group["gpus"]
    return resources


def _node_type(provider: providers.Provider, group: dict[str, Any], head: bool) -> dict[str, Any]:
    node: dict[str, Any] = {"resources": _resources(group), "node_config": {}}
    if "instance_type" in group or not provider.INSTANCE_TYPED:
        node["node_config"] = provider.node_config(group)
    if group.get("labels"):
        node["labels"] = dict(group["labels"])
    if head:
        node["min_workers"] = node["max_workers"] = 0
    else:
        node["min_workers"] = group.get("min_workers", 0)
        if "max_workers" in group:
            node["max_workers"] = group["max_workers"]
    return node


def _group_problems(doc: Document, provider: providers.Provider, path: FieldPath,
                    group: dict[str, Any]) -> list[Problem]:
    problems = provider.group_problems(doc, path, group)
    low, high = group.get("min_workers", 0), group.get("max_workers")
    if high is not None and low > high:
        problems.append(doc.problem(path + ("min_workers",),
                                    f"min_workers ({low}) is above max_workers ({high})"))
    return problems


def expand_shorthand(data: dict[str, Any],
                     doc: Document) -> tuple[dict[str, Any], dict[FieldPath, FieldPath], list[Problem]]:
    """Return (Ray-dialect document, origins for line lookup, problems)."""
    if "head" not in data and "workers" not in data:
        return data, {}, []
    problems: list[Problem] = []
    if "available_node_types" in data or "head_node_type" in data:
        key = "available_node_types" if "available_node_types" in data else "head_node_type"
        problems.append(doc.problem((key,), "use either the head/workers shorthand or "
                                    "available_node_types/head_node_type, not both"))
        return data, {}, problems
    provider = providers.get(data["provider"]["type"])
    head = data.pop("head", {}) or {}
    workers = data.pop("workers", {}) or {}
    if HEAD_TYPE in workers:
        problems.append(doc.problem(("workers", HEAD_TYPE), f"'{HEAD_TYPE}' names the head's node type; "
                                    "choose another name for this worker group"))
    types: dict[str, Any] = {}
    origins: dict[FieldPath, FieldPath] = {}
    problems += _group_problems(doc, provider, ("head",), head)
    types[HEAD_TYPE] = _node_type(provider, head, head=True)
    origins[("available_node_types", HEAD_TYPE)] = ("head",)
    for name, group in workers.items():
        problems += _group_problems(doc, provider, ("workers", name), group)
        types[name] = _node_type(provider, group, head=False)
        origins[("available_node_types", name)] = ("workers", name)
    data["available_node_types"] = types
    data["head_node_type"] = HEAD_TYPE
    if "max_workers" not in data:
        data["max_workers"] = sum(g.get("max_workers", g.get("min_workers", 0)) for g in workers.values())
    return data, origins, problems
