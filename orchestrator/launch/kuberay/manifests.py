"""A KubeRay cluster's config (Ray's dialect, provider `kuberay`) -> the RayCluster KubeRay runs.

    ray_cluster(config) -> dict        the RayCluster resource (ray.io/v1)
    secret_name(cluster) -> str        the Secret holding the cluster's token (never rendered)
    network_policy(cluster) -> dict    the NetworkPolicy beside a RayCluster: its pods take
                                       connections from one another only
    job_network_policy(job) -> dict    the same beside a RayJob (its submitter and KubeRay's
                                       operator also reach the head's dashboard)

Pure: the same config always gives the same resource. What Ray's own autoscaler reads back from
it (ray/autoscaler/_private/kuberay/autoscaling_config.py) is the config's node types: each
group's `resources` (what Ray advertises), min/max replicas, `labels`, and the autoscaler's
idle timeout and upscaling mode; tests/launch/test_kuberay_manifests.py holds Ray's reading to the file.
Every resource is checked against KubeRay's CRD schema and the operator's rules
(orchestrator.launch.kuberay.check) before anything reaches an API server.
"""
from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any, Protocol

from ...providers import kuberay


class Submission(Protocol):
    """What a RayJob is made from: a job to submit (render.experiment's JobPlan)."""

    @property
    def runtime_env(self) -> dict[str, Any]: ...
    @property
    def config(self) -> Mapping[str, object]: ...
    @property
    def submission_id(self) -> str: ...


Config = dict[str, Any]

API_VERSION = "ray.io/v1"
RAY_VERSION = "2.60.0"          # the Ray orchestrate pins (pyproject.toml's `ray` extra)
MANAGED_BY = {"app.kubernetes.io/managed-by": "orchestrate"}
CLUSTER_LABEL = "orchestrate.dev/cluster"
# The key of the token in the cluster's Secret.
TOKEN_KEY = "auth_token"
# The head's ports, named as KubeRay names them (it adds any that are missing; naming them here
# makes the rendered pod what runs).
HEAD_PORTS = (("gcs-server", 6379), ("dashboard", 8265), ("client", 10001), ("serve", 8000))
DASHBOARD_PORT = 8265


def secret_name(cluster: str) -> str:
    return f"orchestrate-{cluster}"   # at most 12 + 47 characters: a valid Secret name


def policy_name(name: str) -> str:
    """The NetworkPolicy beside a RayCluster or a RayJob `name` (named as its Secret)."""
    return f"orchestrate-{name}"


def labels(cluster: str) -> dict[str, str]:
    return {**MANAGED_BY, CLUSTER_LABEL: cluster}


def ray_cluster(config: Config) -> Config:
    name = str(config["cluster_name"])
    provider = config["provider"]
    head_type = config["head_node_type"]
    types = config.get("available_node_types") or {}
    workers = [(n, t) for n, t in sorted(types.items()) if n != head_type]
    spec: Config = {
        "rayVersion": RAY_VERSION,
        "authOptions": {"mode": "token", "secretName": secret_name(name)},
        "headGroupSpec": _head(provider, types[head_type]),
        "workerGroupSpecs": [_workers(provider, n, t, config) for n, t in workers],
    }
    if any(_bounds(t, config)[0] != _bounds(t, config)[1] for _, t in workers):
        spec["enableInTreeAutoscaling"] = True
        options: Config = {"upscalingMode": "Conservative"
                           if config.get("upscaling_speed") == kuberay.CONSERVATIVE_SPEED
                           else "Default"}
        if config.get("idle_timeout_minutes") is not None:
            options["idleTimeoutSeconds"] = int(round(float(config["idle_timeout_minutes"]) * 60))
        spec["autoscalerOptions"] = options
    return {"apiVersion": API_VERSION, "kind": "RayCluster",
            "metadata": {"name": name, "namespace": str(provider["namespace"]),
                         "labels": labels(name)},
            "spec": spec}


def _bounds(node_type: Config, config: Config) -> tuple[int, int]:
    low = int(node_type.get("min_workers", 0) or 0)
    high = node_type.get("max_workers")
    if high is None:
        high = config.get("max_workers", low)
    return low, max(low, int(high or 0))


def _head(provider: Config, node_type: Config) -> Config:
    group: Config = {
        "rayStartParams": {"dashboard-host": "0.0.0.0"},
        "template": _pod(provider, node_type, "ray-head", HEAD_PORTS),
    }
    return {**_ray_side(node_type), **group}


def _workers(provider: Config, name: str, node_type: Config, config: Config) -> Config:
    low, high = _bounds(node_type, config)
    return {"groupName": name, "replicas": low, "minReplicas": low, "maxReplicas": high,
            "rayStartParams": {}, **_ray_side(node_type),
            "template": _pod(provider, node_type, "ray-worker", ())}


def _ray_side(node_type: Config) -> Config:
    """What Ray advertises (the group's `resources`, strings as KubeRay's CRD has them) and
    its node labels."""
    side: Config = {}
    resources = node_type.get("resources") or {}
    if resources:
        side["resources"] = {key: str(value) for key, value in sorted(resources.items())}
    if node_type.get("labels"):
        side["labels"] = dict(node_type["labels"])
    return side


def _pod(provider: Config, node_type: Config, container: str,
         ports: tuple[tuple[str, int], ...]) -> Config:
    node = node_type.get("node_config") or {}
    resources = node_type.get("resources") or {}
    amounts: Config = {}
    if resources.get("CPU"):
        amounts["cpu"] = str(resources["CPU"])
    if node.get("memory"):
        amounts["memory"] = str(node["memory"])
    limits = dict(amounts)
    if resources.get("GPU"):
        limits["nvidia.com/gpu"] = str(resources["GPU"])
    body: Config = {"name": container, "image": str(node.get("image") or provider["image"])}
    if amounts or limits:
        body["resources"] = {key: value for key, value in
                             (("requests", amounts), ("limits", limits)) if value}
    if ports:
        body["ports"] = [{"name": name, "containerPort": port} for name, port in ports]
    pod: Config = {"containers": [body]}
    if node.get("node_selector"):
        pod["nodeSelector"] = dict(node["node_selector"])
    if node.get("tolerations"):
        pod["tolerations"] = copy.deepcopy(node["tolerations"])
    return {"spec": pod}


def source_path(config: Config, path: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Where in the cluster file a field of its RayCluster comes from, for messages."""
    head = config["head_node_type"]
    workers = [n for n in sorted(config.get("available_node_types") or {}) if n != head]
    if path[:2] == ("spec", "headGroupSpec"):
        return ("available_node_types", head)
    if path[:2] == ("spec", "workerGroupSpecs") and len(path) > 2 and \
            isinstance(path[2], int) and path[2] < len(workers):
        return ("available_node_types", workers[path[2]])
    if path[:2] == ("metadata", "namespace"):
        return ("provider", "namespace")
    if path[:1] == ("metadata",):
        return ("cluster_name",)
    if path[:2] == ("spec", "autoscalerOptions"):
        return ("idle_timeout_minutes",) if "idle_timeout_minutes" in config else ()
    return ("provider",)


def refused(config: Config) -> list[tuple[tuple[str | int, ...], str]]:
    """What KubeRay would refuse in the config's RayCluster: (where in the cluster file, what),
    the RayCluster's own field named in each message."""
    from .check import findings

    manifest = ray_cluster(config)
    return [(source_path(config, finding.path),
             f"RayCluster {dotted(finding.path)}: {finding.message}")
            for finding in findings(manifest)]


def dotted(path: tuple[str | int, ...]) -> str:
    """("spec", "workerGroupSpecs", 0, "maxReplicas") -> "spec.workerGroupSpecs[0].maxReplicas"."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


# --- a run on a cluster of its own (RayJob), a service (RayService) ---

# KubeRay's limit on a RayJob's and a RayService's name (validation.go: their clusters' names
# are derived from them); a DNS-1035 label: it starts with a letter.
RESOURCE_NAME_LIMIT = 47


def resource_name(name: str, submission_id: str = "") -> str:
    """`name` as a RayJob or RayService name; with a submission id, its hash ends it (one
    RayJob per submission, as the Job API has one job)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-") or "run"
    if not slug[0].isalpha():
        slug = f"o-{slug}"
    suffix = submission_id.rsplit("-", 1)[-1] if submission_id else ""
    room = RESOURCE_NAME_LIMIT - (len(suffix) + 1 if suffix else 0)
    slug = slug[:room].rstrip("-")
    return f"{slug}-{suffix}" if suffix else slug


def job_runtime_env(runtime_env: Config, uris: Mapping[str, str]) -> Config:
    """The job's runtime_env with its code at the package store's URIs (`uris`: "working_dir",
    "orchestrate"): a RayJob's submitter runs in the Kubernetes cluster and uploads nothing."""
    env = copy.deepcopy(runtime_env)
    env.pop("excludes", None)   # applied already: the zip holds what Ray would have shipped
    if "working_dir" in env:
        env["working_dir"] = uris["working_dir"]
    env["py_modules"] = [uris["orchestrate"]]
    return env


def ray_job(plan: Submission, cluster_config: Config, own: Mapping[str, Any],
            uris: Mapping[str, str]) -> Config:
    """The RayJob of a run on a cluster of its own: KubeRay makes the cluster from the cluster
    file's RayCluster spec, its submitter runs `ray job submit` with orchestrate's entrypoint
    (contract.IMAGE_ENTRYPOINT) and the job's runtime_env (YAML), and the cluster goes after
    the job: `delete_after_seconds` after a success, `keep_failed_seconds` after a failure
    (kuberay#2615: a failed job's head kept to look into), with its workers freed at once
    where no autoscaler would refuse that."""
    from ...contract import IMAGE_ENTRYPOINT

    cluster = ray_cluster(cluster_config)
    name = resource_name(str(plan.config["name"]), plan.submission_id)
    # its own Secret (owned by the RayJob, going with it): a `down` of the cluster file's
    # cluster, or an `up` with a new token, leaves a running RayJob's pods theirs
    cluster["spec"]["authOptions"]["secretName"] = job_secret_name(name)
    # the pods' label its NetworkPolicy selects: KubeRay names the RayJob's cluster (and so
    # its pods' ray.io/cluster) only once it makes it, and copies template labels onto pods
    for group in [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]:
        group["template"] = {"metadata": {"labels": {JOB_LABEL: name}}, **group["template"]}
    spec: Config = {
        "entrypoint": IMAGE_ENTRYPOINT,
        # JSON (which is YAML): KubeRay reads it with Go's YAML, which takes an unquoted 1e-4
        # or 0o17 for a number where Python's writes a string
        "runtimeEnvYAML": as_yaml(job_runtime_env(plan.runtime_env, uris)),
        "jobId": plan.submission_id,
        "submissionMode": "K8sJobMode",
        "rayClusterSpec": cluster["spec"],
    }
    after = int(own.get("delete_after_seconds", 0))
    failed = int(own.get("keep_failed_seconds", KEEP_FAILED_S))
    if failed > after:
        # deletionRules cannot be combined with shutdownAfterJobFinishes (validation.go:771);
        # each rule has its own TTL instead
        # a deployment that failed (the submitter, the head lost) has no FAILED jobStatus: its
        # own rule, or its cluster would stay for ever (rayjob_controller.go isDeletionRuleMatched)
        rules = [_rule("DeleteCluster", "SUCCEEDED", after),
                 _rule("DeleteCluster", "FAILED", failed),
                 {"policy": "DeleteCluster",
                  "condition": {"jobDeploymentStatus": "Failed", "ttlSeconds": failed}}]
        if not cluster["spec"].get("enableInTreeAutoscaling"):   # else KubeRay refuses it
            rules.insert(1, _rule("DeleteWorkers", "FAILED", 0))
        spec["deletionStrategy"] = {"deletionRules": rules}
    else:
        spec["shutdownAfterJobFinishes"] = True
        spec["ttlSecondsAfterFinished"] = after
    return {"apiVersion": API_VERSION, "kind": "RayJob",
            "metadata": {"name": name, "namespace": cluster["metadata"]["namespace"],
                         "labels": {**cluster["metadata"]["labels"],
                                    EXPERIMENT_LABEL: resource_name(str(plan.config["name"]))}},
            "spec": spec}


KEEP_FAILED_S = 3600


def job_secret_name(rayjob: str) -> str:
    return f"orchestrate-{rayjob}"


# --- who may connect to a cluster's pods: a NetworkPolicy ---

POLICY_API = "networking.k8s.io/v1"
# KubeRay's label on every pod of a RayCluster (common/pod.go labelPod: a template cannot
# override it)
RAY_CLUSTER_LABEL = "ray.io/cluster"
JOB_LABEL = "orchestrate.dev/rayjob"
# KubeRay's Helm chart and its kustomize manifests both label the operator's pod so
# (app.kubernetes.io/component: kuberay-operator); its namespace is the installer's choice
OPERATOR = {"app.kubernetes.io/component": "kuberay-operator"}


def network_policy(cluster: Config) -> Config:
    """The NetworkPolicy of a RayCluster (`up` applies it beside the token's Secret): the
    cluster's pods take connections only from one another. A port-forward reaches a pod
    through its kubelet, inside the pod's own network namespace, where no NetworkPolicy
    applies; egress is left open (the image's and runtime_env's downloads, the package store,
    the API server for the autoscaler)."""
    name = str(cluster["metadata"]["name"])
    return _policy(policy_name(name), str(cluster["metadata"]["namespace"]), labels(name),
                   {RAY_CLUSTER_LABEL: name}, [])


def job_network_policy(job: Config) -> Config:
    """The NetworkPolicy of a RayJob's cluster: as a RayCluster's, selecting the pods by the
    RayJob's label (ray_job puts it in their templates), and the head's dashboard port open to
    the RayJob's submitter (K8sJobMode: KubeRay labels its pod with the RayJob's name) and to
    KubeRay's operator, which asks the dashboard for the job's status (rayjob_controller.go
    GetJobInfo). The launcher adds the RayJob as its owner."""
    name = str(job["metadata"]["name"])
    submitter = {"podSelector": {"matchLabels": {"ray.io/originated-from-cr-name": name,
                                                 "ray.io/originated-from-crd": "RayJob"}}}
    operator = {"namespaceSelector": {}, "podSelector": {"matchLabels": dict(OPERATOR)}}
    dashboard = {"from": [submitter, operator],
                 "ports": [{"protocol": "TCP", "port": DASHBOARD_PORT}]}
    return _policy(policy_name(name), str(job["metadata"]["namespace"]),
                   dict(job["metadata"]["labels"]), {JOB_LABEL: name}, [dashboard])


def _policy(name: str, namespace: str, metadata_labels: dict[str, str], pods: dict[str, str],
            more: list[Config]) -> Config:
    return {"apiVersion": POLICY_API, "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace, "labels": metadata_labels},
            "spec": {"podSelector": {"matchLabels": pods},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": {"matchLabels": dict(pods)}}]},
                                 *more]}}


def as_yaml(document: Config) -> str:
    """A YAML field KubeRay reads with Go's YAML (runtimeEnvYAML, serveConfigV2), as JSON:
    every string quoted, read as the string it is."""
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def kept_seconds(own: Mapping[str, Any]) -> int:
    """How long a failed RayJob's cluster stays (the shutdown TTL when failures are not
    kept longer than successes)."""
    after = int(own.get("delete_after_seconds", 0))
    return max(int(own.get("keep_failed_seconds", KEEP_FAILED_S)), after)
EXPERIMENT_LABEL = "orchestrate.dev/experiment"


def _rule(policy: str, status: str, ttl: int) -> Config:
    return {"policy": policy, "condition": {"jobStatus": status, "ttlSeconds": ttl}}


def ray_service(serve_config: Config, cluster_config: Config) -> Config:
    """The RayService of a service: `serveConfigV2` is `serve_config`, the Serve config of its one
    application that `orchestrate serve` deploys (render.service; its proxy on the pod's every
    address, "0.0.0.0"), as YAML; KubeRay PUTs it to the cluster's Serve as JSON."""
    cluster = ray_cluster(cluster_config)
    port = serve_config["http_options"]["port"]
    [application] = serve_config["applications"]
    for entry in cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]:
        if entry["name"] == "serve":   # KubeRay's probes and serve Service use the named port
            entry["containerPort"] = port
    return {"apiVersion": API_VERSION, "kind": "RayService",
            "metadata": {"name": resource_name(str(application["name"])),
                         "namespace": cluster["metadata"]["namespace"],
                         "labels": cluster["metadata"]["labels"]},
            "spec": {"serveConfigV2": as_yaml(serve_config),
                     "rayClusterConfig": cluster["spec"]}}


def findings_at(manifest: Config) -> list[str]:
    """What KubeRay would refuse in a RayJob or RayService, one line each with its field."""
    from .check import findings

    return [f"{manifest['kind']} {dotted(f.path)}: {f.message}" for f in findings(manifest)]
