"""Where `orchestrate validate` and Ray's launcher may disagree on a cluster file, on purpose.
Each entry is a row of docs/clusters.md ("The cluster YAML", stricter checks): the reason, a predicate
on the parsed file that says when it applies, and a file it applies to. Any other disagreement
fails tests/language/test_ray_agreement.py.

STRICTER: validate refuses what Ray's launcher (prepare_config + validate_config) accepts.
LOOSER: validate accepts what Ray refuses (it cannot know offline, or it is orchestrate's own).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.providers.local import _is_host, exposed_dashboard_hosts

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")
USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
NEEDED = {"aws": ("region",), "gcp": ("region", "availability_zone", "project_id"),
          "azure": ("location", "resource_group")}
CLOUDS = tuple(NEEDED)


@dataclass(frozen=True)
class Difference:
    reason: str
    applies: Callable[[dict[str, Any]], bool]
    example: dict[str, Any]


def _provider(doc: dict[str, Any]) -> dict[str, Any]:
    provider = doc.get("provider")
    return provider if isinstance(provider, dict) else {}


def _kind(doc: dict[str, Any]) -> Any:
    return _provider(doc).get("type")


def _types(doc: dict[str, Any]) -> dict[str, Any]:
    types = doc.get("available_node_types")
    return {k: v for k, v in types.items() if isinstance(v, dict)} if isinstance(types, dict) else {}


def _missing_fields(doc: dict[str, Any]) -> bool:
    provider, kind = _provider(doc), _kind(doc)
    if kind == "local":
        if "coordinator_address" in provider:
            return "max_workers" not in doc
        return any(provider.get(key) in (None, "") for key in ("head_ip", "worker_ips"))
    return any(provider.get(key) in (None, "") for key in NEEDED.get(kind, ()))


def _bad_hosts(doc: dict[str, Any]) -> bool:
    if _kind(doc) != "local":
        return False
    provider = _provider(doc)
    hosts = [provider.get("head_ip")] if "head_ip" in provider else []
    workers = provider.get("worker_ips")
    hosts += workers if isinstance(workers, list) else [workers] if isinstance(workers, str) else []
    return any(h is not None and not (isinstance(h, str) and _is_host(h)) for h in hosts)


def _counts(doc: dict[str, Any]) -> list[Any]:
    counts = []
    for node in _types(doc).values():
        counts += [node.get("min_workers"), node.get("max_workers")]
    return [c for c in counts if isinstance(c, int) and not isinstance(c, bool)]


def _min_above_max(doc: dict[str, Any]) -> bool:
    for node in _types(doc).values():
        low, high = node.get("min_workers", 0), node.get("max_workers")
        if isinstance(low, int) and isinstance(high, int) and low > high:
            return True
    return False


def _unlisted_instance_type(catalogue: set[str]) -> Callable[[dict[str, Any]], bool]:
    def applies(doc: dict[str, Any]) -> bool:
        return _kind(doc) == "aws" and any(
            isinstance(node.get("node_config"), dict)
            and isinstance(node["node_config"].get("InstanceType"), str)
            and node["node_config"]["InstanceType"] not in catalogue
            for node in _types(doc).values())
    return applies


def ec2_listed() -> set[str]:
    """The instance types moto's EC2 lists (the tests' catalogue, asked at the wire by Ray's own
    fill-in): moto serves its bundled catalogue whole for every region. Retired types, such as
    the p2.xlarge and p3.8xlarge of Ray's examples, are not in it."""
    import gzip
    import json
    from pathlib import Path

    import moto

    catalogue = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    with gzip.open(catalogue) as handle:
        return set(json.load(handle))


STRICTER = [
    Difference("cluster_name: 1-40 letters, digits, '-' or '_', starting with a letter: it goes "
               "into shell commands and cloud resource names",
               lambda d: not (isinstance(d.get("cluster_name"), str)
                              and NAME.fullmatch(d["cluster_name"])),
               {"cluster_name": "my cluster", "provider": {"type": "aws", "region": "us-west-2"}}),
    Difference("on gcp, cluster_name in lowercase without '_': GCP resource names allow no other",
               lambda d: _kind(d) == "gcp" and isinstance(d.get("cluster_name"), str)
               and (d["cluster_name"].lower() != d["cluster_name"] or "_" in d["cluster_name"]),
               {"cluster_name": "My_Cluster", "provider": {"type": "gcp", "region": "us-west1",
                                                           "availability_zone": "us-west1-a",
                                                           "project_id": "p"}}),
    Difference("provider fields Ray reads only after validating (its bootstrap fails without "
               "them): aws region; gcp region, availability_zone, project_id; azure location, "
               "resource_group; local head_ip and worker_ips, or coordinator_address and max_workers",
               _missing_fields,
               {"cluster_name": "c", "provider": {"type": "gcp", "region": "us-west1",
                                                  "availability_zone": "us-west1-a",
                                                  "project_id": None}}),
    Difference("gcp availability_zone inside provider.region",
               lambda d: _kind(d) == "gcp" and isinstance(_provider(d).get("availability_zone"), str)
               and isinstance(_provider(d).get("region"), str)
               and not _provider(d)["availability_zone"].startswith(_provider(d)["region"] + "-"),
               {"cluster_name": "c", "provider": {"type": "gcp", "region": "us-west1",
                                                  "availability_zone": "europe-west4-a",
                                                  "project_id": "p"}}),
    Difference("local head_ip and worker_ips are IP addresses or host names",
               _bad_hosts,
               {"cluster_name": "c", "provider": {"type": "local", "head_ip": "YOUR_HEAD_NODE",
                                                  "worker_ips": []}}),
    Difference("auth.ssh_user is a user name: Ray writes it into shell commands",
               lambda d: isinstance(d.get("auth"), dict) and isinstance(d["auth"].get("ssh_user"), str)
               and not USER.fullmatch(d["auth"]["ssh_user"]),
               {"cluster_name": "c", "provider": {"type": "aws", "region": "us-west-2"},
                "auth": {"ssh_user": "ubuntu; rm -rf ~"}}),
    Difference("a top-level min_workers other than 0 on a cloud: Ray ignores it without a word",
               lambda d: _kind(d) in CLOUDS and "min_workers" in d and d["min_workers"] != 0,
               {"cluster_name": "c", "provider": {"type": "aws", "region": "us-west-2"},
                "min_workers": 1}),
    Difference("a node type's min_workers and max_workers >= 0 (Ray's schema bounds only the "
               "cluster's max_workers)",
               lambda d: any(c < 0 for c in _counts(d)),
               {"cluster_name": "c", "provider": {"type": "azure", "location": "westus2",
                                                  "resource_group": "rg"},
                "available_node_types": {"ray.head.default": {"node_config": {}, "resources": {},
                                                              "min_workers": -1}}}),
    Difference("a node type's min_workers <= its max_workers (Ray does not compare them)",
               _min_above_max,
               {"cluster_name": "c", "provider": {"type": "azure", "location": "westus2",
                                                  "resource_group": "rg"},
                "available_node_types": {
                    "ray.head.default": {"node_config": {}, "resources": {}},
                    "w": {"node_config": {}, "resources": {}, "min_workers": 2, "max_workers": 1}}}),
    Difference("a file_mounts source is not empty (Ray would hand rsync an empty path; a null "
               "one Ray refuses too)",
               lambda d: isinstance(d.get("file_mounts"), dict) and "" in d["file_mounts"].values(),
               {"cluster_name": "c", "provider": {"type": "aws", "region": "us-west-2"},
                "file_mounts": {"/remote": ""}}),
    Difference("on local, no head_node_type and no node types: Ray ignores the first and builds "
               "its own node type",
               lambda d: _kind(d) == "local" and (
                   "head_node_type" in d and d["head_node_type"]
                   or "head_node_type" in d and not isinstance(d["head_node_type"], (str, type(None)))
                   or bool(d.get("available_node_types"))),
               {"cluster_name": "c", "provider": {"type": "local", "head_ip": "10.0.0.1",
                                                  "worker_ips": []}, "head_node_type": "head"}),
    Difference("on local, a --dashboard-host off the head's loopback: the job API would carry "
               "the cluster's token over the LAN in clear (orchestrate reaches it through an SSH "
               "forward)",
               lambda d: _kind(d) == "local" and isinstance(d.get("head_start_ray_commands"), list)
               and any(exposed_dashboard_hosts(str(c)) for c in d["head_start_ray_commands"]),
               {"cluster_name": "c", "provider": {"type": "local", "head_ip": "10.0.0.1",
                                                  "worker_ips": []},
                "head_start_ray_commands": ["ray start --head --dashboard-host=0.0.0.0"]}),
]

LOOSER = [
    Difference("orchestrate's head/workers shorthand: Ray does not read it; `render` turns it into "
               "the node types Ray reads",
               lambda d: "head" in d or "workers" in d,
               {"cluster_name": "c", "provider": {"type": "aws", "region": "us-west-2"},
                "head": {"instance_type": "m5.large"}}),
    Difference("an AWS InstanceType EC2 does not list: validate works offline (`orchestrate check` "
               "asks EC2); Ray fills no resources and refuses the node types that have none",
               _unlisted_instance_type(ec2_listed()),
               {"cluster_name": "c", "provider": {"type": "aws", "region": "us-west-2"},
                "available_node_types": {"ray.head.default": {"node_config": {
                    "InstanceType": "p3.8xlarge"}}}}),
    Difference("a lone empty head_node or worker_nodes, without the other and without "
               "available_node_types: Ray's legacy conversion fails on it (KeyError); orchestrate "
               "drops it with a warning, as Ray drops an empty pair",
               lambda d: _kind(d) in CLOUDS and "available_node_types" not in d
               and (("head_node" in d) != ("worker_nodes" in d))
               and not d.get("head_node", d.get("worker_nodes")),
               {"cluster_name": "c", "provider": {"type": "aws", "region": "us-west-2"},
                "head_node": {}}),
]
