"""`kuberay`: a Ray cluster on Kubernetes, run by KubeRay's operator from a RayCluster resource.

The cluster file keeps Ray's dialect (Ray's own autoscaler calls this provider type `kuberay`,
ray/autoscaler/_private/kuberay): `provider` says where (`namespace`, the kubeconfig `context`)
and which container `image` the pods run; node types say what each pod gets:

    provider: {type: kuberay, namespace: ml, image: rayproject/ray:2.60.0-py311}
    head: {cpus: 2, memory: 8Gi}
    workers:
      gpu: {cpus: 8, memory: 32Gi, gpus: 1, min_workers: 0, max_workers: 4}

A node type's `resources` (CPU, GPU, custom) are what Ray advertises and, for CPU and GPU, the
pod's requests and limits; its `node_config` holds the pod's own settings (NODE_CONFIG_KEYS).
The `kuberay` launch backend (orchestrator/launch/kuberay/) turns the file into the RayCluster
and applies it through the `kubernetes` client (the `kuberay` extra, imported inside functions).

Ray's cluster launcher does nothing here: KubeRay starts Ray in the image, so the launcher's
commands, file mounts and SSH settings are refused (LAUNCHER_ONLY), as are orchestrate's head
watcher settings (autostop, archive), which need a head orchestrate starts itself.
"""
from __future__ import annotations

import os
import re
from typing import Any

from ..errors import MissingDependency, Problem
from ..util.text import did_you_mean
from ..yamlload import Document
from .base import WARN, CheckResult, Checks, ClusterView, Config, FieldPath, NodePrice, node_types

NAME = "kuberay"
LAUNCH = "kuberay"
EXTRA = "kuberay"
KEYS = ("namespace", "context", "image")
REQUIRED = ("namespace", "image")
# Another namespace or API server is another cluster.
REPLACE_FIELDS = ("provider.namespace", "provider.context")
SCALING_FIELDS: tuple[str, ...] = ()
FIXED_HOSTS = False
INSTANCE_TYPED = False   # a pod is described by its resources
LEGACY_KEYS: tuple[str, ...] = ()
RAY_REPLACES: tuple[str, ...] = ()
DEFAULT_START: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())

# A node type's node_config on Kubernetes: the pod's container image (else provider.image), its
# memory request and limit (a Kubernetes quantity), where it may be scheduled.
NODE_CONFIG_KEYS = ("image", "memory", "node_selector", "tolerations")
# Read by Ray's cluster launcher only, which a KubeRay cluster never runs.
LAUNCHER_ONLY = ("auth", "docker", "file_mounts", "cluster_synced_files", "rsync_exclude",
                 "rsync_filter", "file_mounts_sync_continuously", "initialization_commands",
                 "setup_commands", "head_setup_commands", "worker_setup_commands",
                 "head_start_ray_commands", "worker_start_ray_commands")
# orchestrate's settings that need its watcher on a head it starts (orchestrator/head).
HEAD_WATCHER_ONLY = ("autostop", "archive", "host_price_per_hour")
# Shorthand keys that describe a VM, not a pod.
VM_ONLY = ("disk_gb", "spot", "gpu_type")
# KubeRay's autoscaler offers two speeds (upscalingMode): Conservative, which Ray's autoscaler
# runs as upscaling_speed 1, and Default (Aggressive is the same), which it runs unlimited
# (ray/autoscaler/_private/kuberay/autoscaling_config.py).
CONSERVATIVE_SPEED = 1
# A Kubernetes quantity (apimachinery's resource.Quantity), as a string: 512Mi, 8Gi, 1.5G.
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
# metadata.name of a RayCluster: a DNS-1123 label; KubeRay derives Service names from it.
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAME_LIMIT = 47   # KubeRay's limit on a RayCluster's name (its pods' names must stay under 63)


def problems(doc: Document, data: Config) -> list[Problem]:
    found: list[Problem] = []
    name = data.get("cluster_name")
    if isinstance(name, str) and (not DNS_LABEL.match(name) or len(name) > NAME_LIMIT):
        found.append(doc.problem(("cluster_name",), f"'{name}' cannot name a RayCluster",
                                 f"on Kubernetes use at most {NAME_LIMIT} lower-case letters, "
                                 "digits and '-', starting and ending with a letter or digit"))
    for key in LAUNCHER_ONLY:
        if data.get(key):
            found.append(doc.problem((key,), f"'{key}' is for Ray's cluster launcher, which a "
                                     "KubeRay cluster does not run",
                                     "KubeRay starts Ray in the container image: put what "
                                     "the nodes need in provider.image"))
    for key in HEAD_WATCHER_ONLY:
        if key in data:
            found.append(doc.problem((key,), f"'{key}' is not available on KubeRay clusters "
                                     "yet", "remove it; it works on clouds and on-prem hosts"))
    speed = data.get("upscaling_speed")
    if speed is not None and speed != CONSERVATIVE_SPEED:
        found.append(doc.problem(("upscaling_speed",), f"KubeRay's autoscaler cannot scale up "
                                 f"at speed {speed}", "use 1 (KubeRay's Conservative mode), or "
                                 "leave it out for no limit (its Default mode)"))
    for name, node_type in node_types(data):
        found += _node_type_problems(doc, name, node_type, data.get("head_node_type") == name)
    return found


def _node_type_problems(doc: Document, name: str, node_type: Config, head: bool) -> list[Problem]:
    found = []
    path: FieldPath = ("available_node_types", name)
    config = node_type.get("node_config") or {}
    for key in config:
        if key not in NODE_CONFIG_KEYS:
            found.append(doc.problem(path + ("node_config", key),
                                     f"'{key}' is not a node_config key on KubeRay",
                                     did_you_mean(key, NODE_CONFIG_KEYS) or
                                     f"keys: {', '.join(NODE_CONFIG_KEYS)}"))
    if "memory" in config:
        found += _quantity(doc, path + ("node_config", "memory"), config["memory"])
    if not head and "CPU" not in (node_type.get("resources") or {}):
        found.append(doc.problem(path + ("resources",), "a worker type on KubeRay needs "
                                 "resources.CPU: its pods' CPU request, and what the autoscaler "
                                 "counts"))
    return found


def _quantity(doc: Document, path: FieldPath, value: Any) -> list[Problem]:
    if isinstance(value, str) and QUANTITY.match(value):
        return []
    return [doc.problem(path, f"expected a Kubernetes quantity such as 512Mi or 16Gi, "
                              f"got {value!r}")]


def group_problems(doc: Document, path: FieldPath, group: Config) -> list[Problem]:
    found = [doc.problem(path + (key,), f"'{key}' describes a VM; a KubeRay node is a pod",
                         "remove it") for key in VM_ONLY if key in group]
    if "memory" in group:
        found += _quantity(doc, path + ("memory",), group["memory"])
    if path[0] == "workers" and "cpus" not in group:
        found.append(doc.problem(path, "missing 'cpus', required on provider kuberay (the pods' "
                                       "CPU request, and what the autoscaler counts)"))
    return found


def node_config(group: Config) -> Config:
    config: Config = {}
    for key in ("image", "memory"):
        if key in group:
            config[key] = group[key]
    if "instance_type" in group:   # the well-known label every cloud's nodes carry
        config["node_selector"] = {"node.kubernetes.io/instance-type": group["instance_type"]}
    return config


# --- rendering and up ---

def dashboard_host(config: Config, chosen: str | None) -> str:
    """The head's dashboard listens on the pod's addresses (KubeRay's operator, the RayJob
    submitter and RayService reach it through the head's Service); from this machine it is
    reached only through a port-forward, as a loopback port: the record says loopback."""
    return "127.0.0.1"


def tls_names(config: Config) -> tuple[str, ...]:
    return ()


def expected_nodes(config: Config) -> int:
    head = config.get("head_node_type")
    return 1 + sum(int(t.get("min_workers", 0) or 0) for n, t in node_types(config) if n != head)


def not_joined(config: Config, node_ips: tuple[str, ...]) -> list[str]:
    return []


def after_down(config: Config, progress: Any) -> list[str]:
    return []


# --- prices ---

def price_layout(config: Config) -> Config:
    return {key: config.get(key) for key in ("head_node_type", "available_node_types",
                                             "max_workers")}


def node_price(config: Config, name: str, node_type: Config) -> NodePrice:
    return NodePrice(name, "pod", "", False, None)


def price_warning(config: Config, name: str, node_type: Config) -> str | None:
    return None   # said once, by price_source: a warning per node type would say it again


def price_source(config: Config) -> str:
    return "no list prices for Kubernetes pods: what a pod costs is the node it runs on"


# --- preflight ---

def kubeconfig_file() -> str:
    """KUBECONFIG as kubectl reads it (several files, merged), else ~/.kube/config."""
    return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def api_client(provider: Config) -> Any:
    """The `kubernetes` client for the cluster file's context (the kubeconfig's current one
    when it names none); MissingDependency without the extra."""
    try:
        from kubernetes import config as kube_config
    except ImportError:
        raise MissingDependency("kubernetes", EXTRA) from None
    return kube_config.new_client_from_config(config_file=kubeconfig_file(),
                                              context=provider.get("context"))


def close(client: Any) -> None:
    """Close a client for good: ApiClient.close() ends its thread pool only, and urllib3 2's
    PoolManager.clear() drops its pools without closing their connections."""
    client.close()
    manager = client.rest_client.pool_manager
    for key in list(manager.pools.keys()):
        manager.pools[key].close()
    manager.clear()


def _has_auth_options(crd: Any) -> bool:
    for version in crd.spec.versions or []:
        if version.name == "v1" and version.schema is not None:
            schema = version.schema.open_apiv3_schema
            spec = (schema.properties or {}).get("spec")
            return spec is not None and "authOptions" in (spec.properties or {})
    return False


def credentials() -> CheckResult:
    path = kubeconfig_file()
    if not any(os.path.exists(p) for p in path.split(os.pathsep) if p):
        return CheckResult("kubernetes credentials", WARN, f"no kubeconfig at {path}",
                           "set KUBECONFIG, or write ~/.kube/config (your cloud's CLI does)")
    try:
        from kubernetes import config as kube_config
    except ImportError:
        raise MissingDependency("kubernetes", EXTRA) from None
    try:
        _, current = kube_config.list_kube_config_contexts(config_file=path)
    except Exception as exc:  # noqa: BLE001 - the client's own errors for a bad file
        return CheckResult("kubernetes credentials", WARN, f"{path}: {exc}".splitlines()[0])
    return CheckResult("kubernetes credentials", "ok",
                       f"{path}, current context {current.get('name') if current else 'none'}")


CRDS = ("rayclusters.ray.io", "rayjobs.ray.io", "rayservices.ray.io")


def check(spec: ClusterView) -> list[CheckResult]:
    """The API server is reachable with these credentials, KubeRay's CRDs are installed (its
    operator is what turns a RayCluster into pods), and the namespace exists."""
    checks = Checks(spec)
    provider = spec.document.get("provider") or {}
    namespace = str(provider.get("namespace"))
    try:
        client = api_client(provider)
    except MissingDependency:
        raise
    except Exception as exc:  # noqa: BLE001 - a missing or bad kubeconfig, an unknown context
        checks.fail("kubernetes credentials", str(exc).splitlines()[0][:300],
                    "check KUBECONFIG and provider.context", ("provider", "context")
                    if provider.get("context") else ("provider",))
        return checks.results
    from kubernetes.client import ApiextensionsV1Api, CoreV1Api
    from kubernetes.client.exceptions import ApiException

    try:
        crds = ApiextensionsV1Api(client)
        missing, old, read = [], [], {}
        for crd in CRDS:
            try:
                found = read[crd] = crds.read_custom_resource_definition(crd)
                served = [v.name for v in found.spec.versions if v.served]
            except ApiException as exc:
                if exc.status != 404:
                    raise
                missing.append(crd)
                continue
            if "v1" not in served:
                old.append(f"{crd} serves {', '.join(served)}")
        if missing:
            checks.fail("kuberay", f"KubeRay's operator is not on this Kubernetes cluster: "
                        f"{', '.join(missing)} not installed", "install it: helm install "
                        "kuberay-operator kuberay/kuberay-operator (v1.7.0 or newer)",
                        ("provider", "type"))
        elif old:
            checks.fail("kuberay", f"KubeRay is older than v1: {'; '.join(old)}",
                        "upgrade KubeRay to v1.7.0 or newer", ("provider", "type"))
        elif not _has_auth_options(read[CRDS[0]]):
            checks.fail("kuberay", "this KubeRay's RayCluster has no authOptions (before "
                        "v1.5): the API server would drop them, and the cluster would run "
                        "without token authentication", "upgrade KubeRay to v1.7.0 or newer",
                        ("provider", "type"))
        else:
            checks.ok("kuberay", f"KubeRay's CRDs installed ({', '.join(CRDS)}, v1)",
                      ("provider", "type"))
        try:
            CoreV1Api(client).read_namespace(namespace)
            checks.ok("namespace", f"namespace {namespace} exists", ("provider", "namespace"))
        except ApiException as exc:
            if exc.status != 404:
                raise
            checks.fail("namespace", f"namespace {namespace} does not exist",
                        f"create it: kubectl create namespace {namespace}",
                        ("provider", "namespace"))
    except ApiException as exc:
        checks.fail("kubernetes api", f"the API server answered {exc.status} {exc.reason}",
                    "check the kubeconfig's credentials and your access to the namespace",
                    ("provider",))
    except Exception as exc:  # noqa: BLE001 - connection refused, TLS, DNS: one line each
        checks.fail("kubernetes api", f"the API server could not be reached: "
                    f"{str(exc).splitlines()[0][:200]}", "check the kubeconfig's server",
                    ("provider",))
    finally:
        close(client)
    return checks.results
