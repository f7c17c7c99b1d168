"""What the three clouds (aws, gcp, azure) do alike; each cloud module takes these by name.

On a cloud the head's dashboard listens on its loopback only and is reached through an SSH
forward, the head's address comes from `ray get-head-ip`, and `ray down` removes every node.
"""
from __future__ import annotations

from typing import Any

from .. import cluster_settings
from ..errors import Problem
from ..util.progress import Progress
from ..yamlload import Document
from . import prices
from .base import (
    WARN,
    CheckResult,
    Checks,
    ClusterView,
    Config,
    FieldPath,
    NodePrice,
    node_path,
)

LEGACY_KEYS: tuple[str, ...] = ()
RAY_REPLACES: tuple[str, ...] = ()
SCALING_FIELDS: tuple[str, ...] = ()
FIXED_HOSTS = False   # an autoscaler adds nodes up to the node types' max_workers
INSTANCE_TYPED = True  # a shorthand group names its instance type

# Ray's defaults (ray/autoscaler/{aws,gcp,azure}/defaults.yaml).
DEFAULT_START: tuple[tuple[str, ...], tuple[str, ...]] = (
    ("ray stop", "ulimit -n 65536; ray start --head --port=6379 --object-manager-port=8076"
     " --autoscaling-config=~/ray_bootstrap_config.yaml"),
    ("ray stop", "ulimit -n 65536; ray start --address=$RAY_HEAD_IP:6379"
     " --object-manager-port=8076"),
)


LAUNCH = "ray-up"


def dashboard_host(config: Config, chosen: str | None) -> str:
    return "127.0.0.1"  # whatever the file says: reached through an SSH forward only


def tls_names(config: Config) -> tuple[str, ...]:
    # The nodes' addresses are known only once launched, and Ray's gRPC checks the server's
    # address against its certificate: no TLS (the nodes talk inside the cloud's network).
    return ()


def head_address(config: Config) -> str | None:
    return None


def expected_nodes(config: Config) -> int:
    head_type = config.get("head_node_type")
    return 1 + sum(int(t.get("min_workers") or 0)
                   for n, t in (config.get("available_node_types") or {}).items() if n != head_type)


def launcher_env() -> dict[str, str]:
    return {}


def not_joined(config: Config, node_ips: tuple[str, ...]) -> list[str]:
    return []


def after_down(config: Config, progress: Progress) -> list[str]:
    return []  # `ray down` terminates every node of the cluster


def group_problems(doc: Document, path: FieldPath, group: Config, name: str,
                   gpu_type: bool = False) -> list[Problem]:
    """A shorthand group on a cloud needs an instance type; gpu_type is gcp's alone."""
    problems = []
    if "instance_type" not in group:
        problems.append(doc.problem(path, f"missing 'instance_type', required on provider {name}"))
    if "memory" in group:
        problems.append(doc.problem(path + ("memory",), f"memory applies to kuberay only; on "
                                    f"{name} the instance type decides it"))
    if group.get("gpu_type") and not gpu_type:
        problems.append(doc.problem(path + ("gpu_type",),
                                    "gpu_type applies to gcp only; elsewhere the instance type "
                                    "decides the GPU"))
    return problems


def node_types_note(spec: ClusterView, name: str) -> list[CheckResult]:
    """Ray's default node types are not in the file, so preflight cannot check them."""
    if spec.document.get("available_node_types"):
        return []
    return [CheckResult(
        "node types", WARN, "no available_node_types: Ray fills in its default node types "
        f"for {name}, which are not checked here",
        "describe the node types in the file to have them checked", "available_node_types")]


# Ray's default node types (ray/autoscaler/{aws,gcp,azure}/defaults.yaml of Ray 2.60), as far as
# a price reads them: a file without available_node_types runs these.
RAY_NODE_TYPES: dict[str, Config] = {
    "aws": {"head_node_type": "ray.head.default", "available_node_types": {
        "ray.head.default": {"node_config": {"InstanceType": "m5.large"}},
        "ray.worker.default": {"min_workers": 0, "node_config": {
            "InstanceType": "m5.large", "InstanceMarketOptions": {"MarketType": "spot"}}}}},
    "gcp": {"head_node_type": "ray_head_default", "available_node_types": {
        "ray_head_default": {"node_config": {"machineType": "n1-standard-2"}},
        "ray_worker_small": {"min_workers": 0, "node_config": {
            "machineType": "n1-standard-2", "scheduling": [{"preemptible": True}]}}}},
    "azure": {"head_node_type": "ray.head.default", "available_node_types": {
        "ray.head.default": {"node_config": {"azure_arm_parameters": {"vmSize": "Standard_D2s_v3"}}},
        "ray.worker.default": {"min_workers": 0, "node_config": {"azure_arm_parameters": {
            "vmSize": "Standard_D2s_v3", "priority": "Spot"}}}}},
}


def price_layout(config: Config, name: str) -> Config:
    """The config's node types, or Ray's defaults when it names none."""
    found = config if config.get("available_node_types") else RAY_NODE_TYPES[name]
    return {"head_node_type": found.get("head_node_type"),
            "available_node_types": found.get("available_node_types"),
            "max_workers": config.get("max_workers", 2)}


def price_source(config: Config) -> str:
    """The catalog this cloud's prices come from: the full one cached by `orchestrate prices
    refresh`, or the subset shipped in the package, with its date."""
    return prices.source(str((config.get("provider") or {}).get("type") or ""))


def priced(cloud: str, name: str, node_type: Config, field: tuple[str, ...], region: str,
           zone: str | None, spot: bool) -> tuple[NodePrice, str | None]:
    """One node type's catalog price, and the warning when the catalog lacks it."""
    value: Any = node_type.get("node_config") or {}
    for key in field:
        value = value.get(key) if isinstance(value, dict) else None
    instance = str(value or "").rstrip("/").rsplit("/", 1)[-1]   # GCP may give a URL
    path = ".".join(str(part) for part in node_path(name, *field))
    hourly = prices.lookup(cloud, instance, region, zone, spot) if instance else None
    warning = None
    if hourly is None:
        what = f"spot {instance}" if spot else instance
        warning = (f"{path}: {what} in {region or 'no region'} is not in the price catalog; its "
                   f"price is unknown{prices.subset_hint(cloud)}") if instance else \
            f"{path}: not given; the price is unknown"
    return NodePrice(name, instance, region, spot, hourly), warning


# Where autostop's setting sits in the Ray config (`cluster_settings`): a head-credentials check
# points there.
AUTOSTOP_PATH = ("metadata", cluster_settings.KEY, "autostop")
HEAD_CREDENTIALS = "head credentials"   # the check's name, the same on every cloud


def autostop_wanted(spec: ClusterView) -> bool:
    """Autostop takes the cluster down from its head, with the head's credentials."""
    return cluster_settings.autostop(spec.document) is not None


ARCHIVE_CHECK = "archive"


def archive_note(spec: ClusterView) -> list[CheckResult]:
    """Autostop without `archive:`: the logs are archived on the head's own disk, which the
    takedown deletes with the head."""
    if not autostop_wanted(spec) or cluster_settings.archive(spec.document) is not None:
        return []
    checks = Checks(spec)
    checks.warn(ARCHIVE_CHECK, "autostop takes the cluster down from its head; without "
                "`archive:` the logs are archived on the head's disk and go with it",
                "set archive: s3://... (the head needs s3:PutObject there)", AUTOSTOP_PATH)
    return checks.results


def head_node_config(spec: ClusterView) -> tuple[str, Config]:
    """(the head's node type, its node_config) in the Ray config."""
    head = str(spec.document.get("head_node_type") or "")
    found = ((spec.document.get("available_node_types") or {}).get(head) or {}).get("node_config")
    return head, dict(found) if isinstance(found, dict) else {}
