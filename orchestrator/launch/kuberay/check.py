"""What KubeRay would refuse in a rendered RayCluster, RayJob or RayService, before an API server sees it.

Two passes, in the order a real cluster applies them:

1. The API server: its CRD schema, pruning and metadata checks (orchestrator.launch.kuberay.
   schema).
2. The operator: the rules of `ray-operator/controllers/ray/utils/validation.go` at v1.7.0 (commit
   59d663aeec13760646da3db9c1cf8cfe883e30b7) that apply to specs orchestrate renders, one small
   function each, named in a comment above it with the Go line it mirrors. KubeRay stops at its first
   error; here every rule runs, so one pass shows everything. Rules whose only effect is a CRD
   constraint already checked in pass 1 are not repeated (deletionRules ttlSeconds >= 0,
   preRunningDeadlineSeconds >= 1, rayClusterDeletionDelaySeconds >= 0, RayCluster
   upgradeStrategy.type enum, the deletionStrategy CEL rules).

Not checked (they need cluster state, the operator's feature gates or its environment):
- feature gates: RayJobDeletionPolicy (Beta, on by default: assumed on, so deletionStrategy and
  worker-group `suspend` are allowed), RayServiceIncrementalUpgrade (Beta, on by default: assumed on,
  so NewClusterWithIncrementalUpgrade is validated), and the Alpha gates, off by default, that refuse a
  field outright when off: RayClusterNetworkPolicy (spec.networkPolicy and validateNetworkPolicy),
  RayClusterMTLS (spec.tlsOptions and validateTLSOptions), RayClusterHistoryServer
  (spec.historyServerOptions and validateCollectorOptions), GCSFaultToleranceEmbeddedStorage (the
  gate check for backend rocksdb; the rocksdb field rules are checked);
- status rules (ValidateRayClusterStatus, ValidateRayJobStatus), RayCronJob;
- the "minReplicas and maxReplicas must be set when autoscaling is disabled" rule (validation.go:125):
  the CRD defaults both, so through an API server they are never unset.
- what the optional validating webhook adds (pkg/webhooks/v1): worker group names unique, which IS
  checked here (rule "worker-group-names"), since duplicate names break the cluster either way.
KubeRay at v1.7.0 has no rule on an empty groupName, numOfHosts, replicas within [min, max] (the
controller clamps), `metrics-export-port`, or the entrypoint per submissionMode; none is invented here.

Pure: no kubernetes client, no network; stdlib, yaml and jsonschema (imported on first use).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from .schema import (  # noqa: F401 - Finding, crd_schema, to_json_schema: this module's API too
    _CRD_FILES,
    _DNS1035_LABEL,
    _JSON_TYPES,
    API_VERSION,
    Finding,
    Path,
    _label_findings,
    _schema_findings,
    crd_schema,
    to_json_schema,
)


def findings(manifest: dict[str, Any]) -> list[Finding]:
    """Everything KubeRay would refuse in one rendered resource (RayCluster, RayJob or RayService,
    told apart by manifest["kind"]; apiVersion must be ray.io/v1): first its CRD's openAPIV3Schema,
    then the operator's own spec rules."""
    kind = manifest.get("kind")
    if kind not in _CRD_FILES:
        return [Finding(("kind",), f"kind {kind!r} is not one of {', '.join(_CRD_FILES)}", "schema")]
    out: list[Finding] = []
    if manifest.get("apiVersion") != API_VERSION:
        given = manifest.get("apiVersion")
        message = f"apiVersion {given!r} is not {API_VERSION!r}, the version KubeRay stores"
        out.append(Finding(("apiVersion",), message, "schema"))
    pruned = _schema_findings(kind, manifest, out)
    name_ok = not any(f.path == ("metadata", "name") for f in out)
    out.extend(_OPERATOR[kind](pruned, name_ok))
    return out


# ---------------------------------------------------------------- operator rules: helpers

def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _i(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _s(value: Any) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class _Cluster:
    """A RayClusterSpec where it sits: a RayCluster's spec, a RayJob's rayClusterSpec or a RayService's
    rayClusterConfig, with the annotations of the resource holding it (KubeRay passes those)."""

    spec: dict[str, Any]
    at: Path
    annotations: dict[str, Any]

    @property
    def head_pod(self) -> dict[str, Any]:
        return _d(_d(_d(self.spec.get("headGroupSpec")).get("template")).get("spec"))

    @property
    def head_container(self) -> dict[str, Any]:
        containers = _l(self.head_pod.get("containers"))
        return _d(containers[0]) if containers else {}  # RayContainerIndex = 0 (constant.go:51)

    def workers(self) -> Iterator[tuple[int, dict[str, Any]]]:
        for i, group in enumerate(_l(self.spec.get("workerGroupSpecs"))):
            yield i, _d(group)

    def worker_at(self, i: int, *rest: str | int) -> Path:
        return self.at + ("workerGroupSpecs", i, *rest)

    @property
    def autoscaling(self) -> bool:  # IsAutoscalingEnabled, util.go:751
        return self.spec.get("enableInTreeAutoscaling") is True

    @property
    def autoscaler_v2(self) -> bool:  # IsAutoscalingV2Enabled, util.go:756
        return _d(self.spec.get("autoscalerOptions")).get("version") == "v2"


def _env(container: dict[str, Any], name: str) -> dict[str, Any] | None:
    """EnvVarByName (util.go:730): the first env entry of that name."""
    for entry in _l(container.get("env")):
        if _d(entry).get("name") == name:
            return _d(entry)
    return None


def _v2_by_env(cluster: _Cluster) -> bool:
    env = _env(cluster.head_container, "RAY_enable_autoscaler_v2")
    return env is not None and env.get("value") in ("1", "true")


def _ray_version(text: str) -> tuple[int, ...] | None:
    """k8s.io/apimachinery version.ParseGeneric: optional 'v', at least two numeric components;
    what follows the numbers is ignored."""
    match = re.match(r"^\s*v?([0-9]+(?:\.[0-9]+)+)", text)
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def _at_least(version: tuple[int, ...], minimum: tuple[int, ...]) -> bool:
    width = max(len(version), len(minimum))
    return version + (0,) * (width - len(version)) >= minimum + (0,) * (width - len(minimum))


ClusterRule = Callable[[_Cluster], Iterator[Finding]]


# ---------------------------------------------------------------- operator rules: RayClusterSpec

# ValidateRayClusterSpec, validation.go:104-106 and 119-121
def _containers(c: _Cluster) -> Iterator[Finding]:
    if not _l(c.head_pod.get("containers")):
        yield Finding(c.at + ("headGroupSpec", "template", "spec", "containers"),
                      "headGroupSpec needs at least one container (the Ray head); KubeRay refuses none",
                      "head-containers")
    for i, group in c.workers():
        if not _l(_d(_d(group.get("template")).get("spec")).get("containers")):
            yield Finding(c.worker_at(i, "template", "spec", "containers"),
                          f"worker group {group.get('groupName')!r} needs at least one container",
                          "worker-containers")


# ValidateRayClusterSpec, validation.go:128-138. Unset min/max (line 125) cannot happen: the CRD defaults
# minReplicas to 0 and maxReplicas to 2147483647.
def _replicas(c: _Cluster) -> Iterator[Finding]:
    for i, group in c.workers():
        name = group.get("groupName")
        low, high = _i(group.get("minReplicas", 0)), _i(group.get("maxReplicas", 2**31 - 1))
        if low is not None and low < 0:
            yield Finding(c.worker_at(i, "minReplicas"), f"worker group {name!r} has negative minReplicas "
                          f"{low}; it must be 0 or more", "worker-replicas")
        if high is not None and high < 0:
            yield Finding(c.worker_at(i, "maxReplicas"), f"worker group {name!r} has negative maxReplicas "
                          f"{high}; it must be 0 or more", "worker-replicas")
        if low is not None and high is not None and low > high:
            yield Finding(c.worker_at(i, "minReplicas"), f"worker group {name!r} has minReplicas {low} "
                          f"greater than maxReplicas {high}; KubeRay needs minReplicas <= maxReplicas",
                          "worker-replicas")


# RayClusterWebhook.validateWorkerGroups, pkg/webhooks/v1/raycluster_webhook.go:69-79 (only when the
# optional webhook is installed; duplicate names make groups share pods either way)
def _worker_group_names(c: _Cluster) -> Iterator[Finding]:
    seen: set[str] = set()
    for i, group in c.workers():
        name = _s(group.get("groupName"))
        if name in seen:
            yield Finding(c.worker_at(i, "groupName"), f"worker group name {name!r} is used twice; "
                          "worker group names must be unique", "worker-group-names")
        seen.add(name)


def _groups(c: _Cluster) -> Iterator[tuple[str, Path, dict[str, Any]]]:
    """The head group and each worker group, with the name KubeRay uses in its messages."""
    yield "Head", c.at + ("headGroupSpec",), _d(c.spec.get("headGroupSpec"))
    for i, group in c.workers():
        yield _s(group.get("groupName")), c.at + ("workerGroupSpecs", i), group


# validateRayGroupResources, validation.go:60-69
def _group_resources(c: _Cluster) -> Iterator[Finding]:
    for name, at, group in _groups(c):
        params = _d(group.get("rayStartParams"))
        set_in_params = [k for k in ("num-cpus", "num-gpus", "memory", "resources") if params.get(k)]
        if set_in_params and _d(group.get("resources")):
            yield Finding(at + ("resources",), f"{name} group sets resources both in rayStartParams "
                          f"({', '.join(set_in_params)}) and in resources; KubeRay allows only one",
                          "group-resources")


# validateRayGroupLabels, validation.go:72-100
def _group_labels(c: _Cluster) -> Iterator[Finding]:
    for name, at, group in _groups(c):
        if "labels" in _d(group.get("rayStartParams")):
            yield Finding(at + ("rayStartParams", "labels"), "rayStartParams['labels'] is not supported for "
                          f"the {name} group; use the group's labels field", "group-labels")
        for finding in _label_findings(group.get("labels"), at + ("labels",)):
            yield Finding(finding.path, f"{name} group: {finding.message}", "group-labels")


# validateWorkerGroupIdleTimeout, validation.go:1006-1027
def _idle_timeout(c: _Cluster) -> Iterator[Finding]:
    for i, group in c.workers():
        seconds = _i(group.get("idleTimeoutSeconds"))
        if seconds is None:
            continue
        at = c.worker_at(i, "idleTimeoutSeconds")
        if seconds < 0:
            yield Finding(at, f"idleTimeoutSeconds must be 0 or more, not {seconds}", "idle-timeout")
        elif not (c.autoscaler_v2 or _v2_by_env(c)):
            yield Finding(at, "idleTimeoutSeconds needs autoscaler v2: set autoscalerOptions.version: v2",
                          "idle-timeout")


# validateWorkerGroupPriority, validation.go:1113-1142
def _priority(c: _Cluster) -> Iterator[Finding]:
    for i, group in c.workers():
        priority = _i(group.get("priority"))
        if not priority:
            continue
        at = c.worker_at(i, "priority")
        version = _ray_version(_s(c.spec.get("rayVersion")))
        if version is None or not _at_least(version, (2, 56, 0)):
            yield Finding(at, "priority needs rayVersion 2.56.0 or later, got "
                          f"{c.spec.get('rayVersion')!r}", "worker-priority")
        elif not (c.autoscaler_v2 or _v2_by_env(c)):
            yield Finding(at, "priority needs autoscaler v2: set autoscalerOptions.version: v2",
                          "worker-priority")


# ValidateRayClusterSpec, validation.go:153-195; validateGcsFaultToleranceBackend, validation.go:333-375
def _gcs_fault_tolerance(c: _Cluster) -> Iterator[Finding]:
    options = c.spec.get("gcsFaultToleranceOptions")
    head_env = c.at + ("headGroupSpec", "template", "spec", "containers", 0, "env")
    params = _d(_d(c.spec.get("headGroupSpec")).get("rayStartParams"))
    ft_annotation = c.annotations.get("ray.io/ft-enabled")
    if ft_annotation and options is not None:
        yield Finding(c.at + ("gcsFaultToleranceOptions",), "the ray.io/ft-enabled annotation and "
                      "gcsFaultToleranceOptions are both set; use only gcsFaultToleranceOptions", "gcs-ft")
    # IsGCSFaultToleranceEnabled, util.go:765
    ft_on = options is not None or _s(ft_annotation).lower() == "true"
    if not ft_on and _env(c.head_container, "RAY_REDIS_ADDRESS") is not None:
        yield Finding(head_env, "RAY_REDIS_ADDRESS in the head container enables GCS fault tolerance "
                      "implicitly; set gcsFaultToleranceOptions instead", "gcs-ft")
    if options is not None:
        if params.get("redis-password"):
            yield Finding(c.at + ("headGroupSpec", "rayStartParams", "redis-password"), "redis-password in "
                          "rayStartParams is refused with gcsFaultToleranceOptions; use its redisPassword",
                          "gcs-ft")
        for var, field in (("REDIS_PASSWORD", "redisPassword"), ("RAY_REDIS_ADDRESS", "redisAddress")):
            if _env(c.head_container, var) is not None:
                yield Finding(head_env, f"{var} in the head container is refused with "
                              f"gcsFaultToleranceOptions; use gcsFaultToleranceOptions.{field}", "gcs-ft")
        if c.annotations.get("ray.io/external-storage-namespace"):
            yield Finding(c.at + ("gcsFaultToleranceOptions",), "the ray.io/external-storage-namespace "
                          "annotation is refused with gcsFaultToleranceOptions; use its "
                          "externalStorageNamespace",
                          "gcs-ft")
        yield from _gcs_backend(c, _d(options), head_env)
    if params.get("redis-username") or _env(c.head_container, "REDIS_USERNAME") is not None:
        yield Finding(c.at + ("headGroupSpec",), "a redis username in rayStartParams or REDIS_USERNAME is "
                      "refused; use gcsFaultToleranceOptions.redisUsername", "gcs-ft")


# validateGcsFaultToleranceBackend, validation.go:333-375 (the feature gate check of line 336 is not made)
def _gcs_backend(c: _Cluster, options: dict[str, Any], head_env: Path) -> Iterator[Finding]:
    at = c.at + ("gcsFaultToleranceOptions",)
    storage = options.get("storage")
    if options.get("backend", "redis") != "rocksdb":
        if storage is not None:
            yield Finding(at + ("storage",), "gcsFaultToleranceOptions.storage applies only to backend "
                          "rocksdb, not redis", "gcs-ft")
        return
    for field in ("redisAddress", "redisUsername", "redisPassword", "externalStorageNamespace"):
        if options.get(field):
            yield Finding(at + (field,), f"gcsFaultToleranceOptions.{field} is refused with backend rocksdb",
                          "gcs-ft")
    storage = _d(storage)
    if storage.get("claimName") and any(k in storage for k in ("size", "storageClassName", "accessModes")):
        yield Finding(at + ("storage",), "storage.claimName excludes size, storageClassName and accessModes",
                      "gcs-ft")
    for var in ("RAY_gcs_storage", "RAY_gcs_storage_path"):
        if _env(c.head_container, var) is not None:
            yield Finding(head_env, f"{var} is managed by KubeRay with backend rocksdb; remove it", "gcs-ft")
    head_mounts = c.at + ("headGroupSpec", "template", "spec", "containers", 0, "volumeMounts")
    for mount in _l(c.head_container.get("volumeMounts")):
        if _d(mount).get("mountPath") == "/data/gcs" or _d(mount).get("name") == "gcs-storage":
            yield Finding(head_mounts, "a volume mount named gcs-storage or at /data/gcs is managed by "
                          "KubeRay with backend rocksdb", "gcs-ft")
    for volume in _l(c.head_pod.get("volumes")):
        if _d(volume).get("name") == "gcs-storage":
            yield Finding(c.at + ("headGroupSpec", "template", "spec", "volumes"), "a volume named "
                          "gcs-storage is managed by KubeRay with backend rocksdb", "gcs-ft")


# ValidateRayClusterSpec, validation.go:205-238 (suspend without the RayJobDeletionPolicy gate, lines
# 197-203, is not checked: the gate is on by default)
def _autoscaler(c: _Cluster) -> Iterator[Finding]:
    head_env = c.at + ("headGroupSpec", "template", "spec", "containers", 0, "env")
    v2_env = _env(c.head_container, "RAY_enable_autoscaler_v2")
    if not c.autoscaling:
        if v2_env is not None and v2_env.get("value") in ("1", "true"):
            yield Finding(head_env, "RAY_enable_autoscaler_v2 is set but enableInTreeAutoscaling is not "
                          "true; set enableInTreeAutoscaling: true", "autoscaler")
        return
    for i, group in c.workers():
        if group.get("suspend") is True:
            yield Finding(c.worker_at(i, "suspend"), f"worker group {group.get('groupName')!r} cannot be "
                          "suspended with the autoscaler enabled", "autoscaler")
    if _d(c.spec.get("autoscalerOptions")).get("version") is not None and v2_env is not None:
        yield Finding(head_env, "both autoscalerOptions.version and RAY_enable_autoscaler_v2 are set; keep "
                      "only autoscalerOptions.version", "autoscaler")
    if c.autoscaler_v2:
        restart = c.head_pod.get("restartPolicy")
        if restart not in (None, "", "Never"):
            yield Finding(c.at + ("headGroupSpec", "template", "spec", "restartPolicy"), f"restartPolicy "
                          f"{restart!r} with autoscaler v2; it must be Never or unset", "autoscaler")
        for i, group in c.workers():
            restart = _d(_d(group.get("template")).get("spec")).get("restartPolicy")
            if restart not in (None, "", "Never"):
                yield Finding(c.worker_at(i, "template", "spec", "restartPolicy"), "restartPolicy "
                              f"{restart!r} with autoscaler v2; it must be Never or unset", "autoscaler")


# ValidateRayClusterSpec, validation.go:241-258
def _autoscaler_options(c: _Cluster) -> Iterator[Finding]:
    options = _d(c.spec.get("autoscalerOptions"))
    at = c.at + ("autoscalerOptions",)
    idle = _i(options.get("idleTimeoutSeconds"))
    if idle is not None and idle < 0:
        yield Finding(at + ("idleTimeoutSeconds",), "autoscalerOptions.idleTimeoutSeconds must be 0 or "
                      f"more, not {idle}", "autoscaler-options")
    if _env(options, "KUBERAY_GEN_AUTOSCALER_START_CMD") is not None:
        yield Finding(at + ("env",), "autoscalerOptions.env must not set KUBERAY_GEN_AUTOSCALER_START_CMD; "
                      "KubeRay injects it", "autoscaler-options")


# ValidateRayClusterSpec, validation.go:284-313 (IsAuthEnabled util.go:796, IsK8sAuthEnabled util.go:800)
def _auth(c: _Cluster) -> Iterator[Finding]:
    auth = c.spec.get("authOptions")
    if not isinstance(auth, dict):
        return
    at = c.at + ("authOptions",)
    k8s_auth = auth.get("enableK8sTokenAuth") is True
    if auth.get("mode") != "token":
        if k8s_auth:
            yield Finding(at + ("enableK8sTokenAuth",), "enableK8sTokenAuth needs authOptions.mode: token",
                          "auth")
        return
    text = _s(c.spec.get("rayVersion"))
    version = _ray_version(text)
    if version is None or not _at_least(version, (2, 52, 0)):
        yield Finding(c.at + ("rayVersion",), f"authOptions.mode token needs rayVersion 2.52.0 or later, "
                      f"got {text!r}", "auth")
    elif k8s_auth and not _at_least(version, (2, 55, 0)):
        yield Finding(c.at + ("rayVersion",), f"enableK8sTokenAuth needs rayVersion 2.55.0 or later, got "
                      f"{text!r}", "auth")
    if k8s_auth and auth.get("secretName"):
        yield Finding(at + ("secretName",), "enableK8sTokenAuth and secretName exclude each other", "auth")


# ValidateRayClusterUpgradeOptions, validation.go:42-57, run on every RayCluster
# (raycluster_controller.go:205), also the one a RayJob or RayService creates, which carries
# ray.io/originated-from-crd (rayjob_controller.go:1001, rayservice_controller.go:1509).
# The type enum itself is in the CRD.
def _embedded_upgrade_strategy(c: _Cluster, owner: str) -> Iterator[Finding]:
    if _d(c.spec.get("upgradeStrategy")).get("type") is not None:
        yield Finding(c.at + ("upgradeStrategy", "type"), f"upgradeStrategy cannot be set on the RayCluster "
                      f"a {owner} creates; KubeRay refuses that cluster", "cluster-upgrade-strategy")


_CLUSTER_RULES: tuple[ClusterRule, ...] = (
    _containers, _replicas, _worker_group_names, _group_resources, _group_labels, _idle_timeout, _priority,
    _gcs_fault_tolerance, _autoscaler, _autoscaler_options, _auth,
)


def _cluster_findings(c: _Cluster) -> Iterator[Finding]:
    for rule in _CLUSTER_RULES:
        yield from rule(c)


# ---------------------------------------------------------------- operator rules: per kind

# MaxRayClusterNameLength = 53, MaxRayJobNameLength = MaxRayServiceNameLength = 53 - 6 (constant.go:375-381)
_NAME_LIMITS = {"RayCluster": 53, "RayJob": 47, "RayService": 47}


# ValidateRayClusterMetadata (validation.go:32-40), ValidateRayJobMetadata (533-541),
# ValidateRayServiceMetadata (632-638)
def _name(kind: str, manifest: dict[str, Any]) -> Iterator[Finding]:
    name = _d(manifest.get("metadata")).get("name")
    if not isinstance(name, str):
        return
    limit = _NAME_LIMITS[kind]
    if len(name) > limit:
        yield Finding(("metadata", "name"), f"{kind} name {name!r} has {len(name)} characters; KubeRay "
                      f"allows at most {limit}", "name")
    if not _DNS1035_LABEL.match(name):
        yield Finding(("metadata", "name"), f"{kind} name {name!r} is not a DNS-1035 label: lowercase "
                      "letters, digits and '-', starting with a letter, ending with a letter or digit",
                      "name")


def _ray_cluster(manifest: dict[str, Any], name_ok: bool) -> Iterator[Finding]:
    if name_ok:
        yield from _name("RayCluster", manifest)
    spec = _d(manifest.get("spec"))
    metadata = _d(manifest.get("metadata"))
    yield from _cluster_findings(_Cluster(spec, ("spec",), _d(metadata.get("annotations"))))
    origin = _d(metadata.get("labels")).get("ray.io/originated-from-crd")
    if origin in ("RayJob", "RayService"):  # GetCRDType, util.go:62
        yield from _embedded_upgrade_strategy(_Cluster(spec, ("spec",), {}), origin)


# ValidateRayJobSpec, validation.go:547-553 and 560-563
def _job_suspend(spec: dict[str, Any]) -> Iterator[Finding]:
    if spec.get("suspend") is True:
        if spec.get("shutdownAfterJobFinishes") is not True:
            yield Finding(("spec", "suspend"), "a RayJob can be suspended only with "
                          "shutdownAfterJobFinishes: true", "job-suspend")
        if _d(spec.get("clusterSelector")):
            yield Finding(("spec", "suspend"), "a RayJob with clusterSelector cannot be suspended",
                          "job-suspend")


# ValidateRayJobSpec, validation.go:551-553; validateDeletionConfiguration, validation.go:753-755
def _job_ttl(spec: dict[str, Any]) -> Iterator[Finding]:
    ttl = _i(spec.get("ttlSecondsAfterFinished", 0)) or 0
    if ttl < 0:
        yield Finding(("spec", "ttlSecondsAfterFinished"), "ttlSecondsAfterFinished must be 0 or more, "
                      f"not {ttl}", "job-ttl")
    elif ttl > 0 and spec.get("shutdownAfterJobFinishes") is not True:
        yield Finding(("spec", "ttlSecondsAfterFinished"), "ttlSecondsAfterFinished needs "
                      "shutdownAfterJobFinishes: true", "job-ttl")


# validateDeletionConfiguration, validation.go:752-792 (the gate check of line 763 is not made: on by default;
# the mixing and completeness checks of lines 774 and 788 are the CRD's CEL rules, checked in the schema pass)
def _deletion_strategy(spec: dict[str, Any]) -> Iterator[Finding]:
    strategy = spec.get("deletionStrategy")
    if not isinstance(strategy, dict):
        return
    rules = _l(strategy.get("deletionRules"))
    legacy = "onSuccess" in strategy or "onFailure" in strategy
    if rules and spec.get("shutdownAfterJobFinishes") is True:
        yield Finding(("spec", "deletionStrategy", "deletionRules"), "deletionRules and "
                      "shutdownAfterJobFinishes: true exclude each other", "deletion-strategy")
    if legacy and not rules:
        yield from _legacy_deletion(spec, strategy)
    elif rules and not legacy:
        yield from _deletion_rules(spec, rules)


# validateLegacyDeletionPolicies, validation.go:928-966 (both onSuccess and onFailure present: CEL)
def _legacy_deletion(spec: dict[str, Any], strategy: dict[str, Any]) -> Iterator[Finding]:
    at: Path = ("spec", "deletionStrategy")
    policies = {}
    for when in ("onSuccess", "onFailure"):
        if when not in strategy:
            return
        policy = _d(strategy.get(when)).get("policy")
        if policy is None:
            yield Finding(at + (when, "policy"), f"deletionStrategy.{when}.policy must be set",
                          "deletion-strategy")
        policies[when] = policy
    selector = bool(_d(spec.get("clusterSelector")))
    autoscaling = _d(spec.get("rayClusterSpec")).get("enableInTreeAutoscaling") is True
    for when, policy in policies.items():
        if selector and policy in ("DeleteCluster", "DeleteWorkers"):
            yield Finding(at + (when, "policy"), f"{policy} is refused with clusterSelector (the cluster is "
                          "not the RayJob's)", "deletion-strategy")
        if autoscaling and policy == "DeleteWorkers":
            yield Finding(at + (when, "policy"), "DeleteWorkers is refused with enableInTreeAutoscaling",
                          "deletion-strategy")
        if spec.get("shutdownAfterJobFinishes") is True and policy == "DeleteNone":
            yield Finding(at + (when, "policy"), "DeleteNone contradicts shutdownAfterJobFinishes: true",
                          "deletion-strategy")


# validateDeletionRules (validation.go:797-868), validateTTLConsistency (892-925); the condition's
# one-of and ttlSeconds >= 0 (validateDeletionCondition, 871-888) are the CRD's, checked in the schema pass
def _deletion_rules(spec: dict[str, Any], rules: list[Any]) -> Iterator[Finding]:
    selector = bool(_d(spec.get("clusterSelector")))
    autoscaling = _d(spec.get("rayClusterSpec")).get("enableInTreeAutoscaling") is True
    by_condition: dict[tuple[str, str], dict[str, int]] = {}
    for i, rule in enumerate(rules):
        at: Path = ("spec", "deletionStrategy", "deletionRules", i)
        policy = _s(_d(rule).get("policy"))
        condition = _d(_d(rule).get("condition"))
        if ("jobStatus" in condition) == ("jobDeploymentStatus" in condition):
            continue
        if selector and policy in ("DeleteCluster", "DeleteWorkers"):
            yield Finding(at + ("policy",), f"{policy} is refused with clusterSelector", "deletion-rules")
            continue
        if autoscaling and policy == "DeleteWorkers":
            yield Finding(at + ("policy",), "DeleteWorkers is refused with enableInTreeAutoscaling",
                          "deletion-rules")
            continue
        field = "jobStatus" if "jobStatus" in condition else "jobDeploymentStatus"
        key = (field, _s(condition.get(field)))
        ttls = by_condition.setdefault(key, {})
        if policy in ttls:
            yield Finding(at, f"a second {policy} rule for {field} {key[1]!r}; each (policy, status) pair "
                          "may appear once", "deletion-rules")
            continue
        ttls[policy] = _i(condition.get("ttlSeconds", 0)) or 0
    for (field, status), ttls in by_condition.items():
        ordered = [(p, ttls[p]) for p in ("DeleteWorkers", "DeleteCluster", "DeleteSelf") if p in ttls]
        for (before, low), (after, high) in zip(ordered, ordered[1:], strict=False):
            if high < low:
                yield Finding(("spec", "deletionStrategy", "deletionRules"), f"for {field} {status!r}: "
                              f"{after} ttlSeconds ({high}) must be >= {before} ttlSeconds ({low})",
                              "deletion-rules")


# ValidateRayJobSpec, validation.go:560-589
def _job_cluster(spec: dict[str, Any]) -> Iterator[Finding]:
    selector = _d(spec.get("clusterSelector"))
    mode = spec.get("submissionMode", "K8sJobMode")
    backoff = _i(spec.get("backoffLimit", 0)) or 0
    if not selector and spec.get("rayClusterSpec") is None:
        yield Finding(("spec",), "a RayJob needs rayClusterSpec or clusterSelector", "job-cluster")
    if selector:
        if not _s(selector.get("ray.io/cluster")):
            yield Finding(("spec", "clusterSelector", "ray.io/cluster"), "clusterSelector needs a non-empty "
                          "ray.io/cluster (the RayCluster's name)", "job-cluster")
        if mode == "SidecarMode":
            yield Finding(("spec", "submissionMode"), "clusterSelector is refused in SidecarMode",
                          "job-cluster")
        if backoff > 0:
            yield Finding(("spec", "backoffLimit"), "backoffLimit > 0 is refused with clusterSelector",
                          "job-backoff")
    if mode == "InteractiveMode" and backoff > 0:
        yield Finding(("spec", "backoffLimit"), "backoffLimit > 0 is refused in InteractiveMode",
                      "job-backoff")
    if backoff < 0:
        yield Finding(("spec", "backoffLimit"), f"backoffLimit must be 0 or more, not {backoff}",
                      "job-backoff")


# ValidateRayJobSpec, validation.go:591-603
def _sidecar_mode(spec: dict[str, Any]) -> Iterator[Finding]:
    if spec.get("submissionMode") != "SidecarMode":
        return
    for field in ("submitterPodTemplate", "submitterConfig"):
        if spec.get(field) is not None:
            yield Finding(("spec", field), f"SidecarMode does not support {field}", "sidecar-mode")
    head_pod = _d(_d(_d(_d(spec.get("rayClusterSpec")).get("headGroupSpec")).get("template")).get("spec"))
    if head_pod.get("restartPolicy") not in (None, "", "Never"):
        yield Finding(("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "restartPolicy"),
                      "the head Pod's restartPolicy must be Never or unset in SidecarMode", "sidecar-mode")


# ValidateRayJobSpec, validation.go:606-608; ValidateRayServiceSpec, validation.go:681-683
def _no_k8s_auth(cluster: _Cluster, kind: str) -> Iterator[Finding]:
    if _d(cluster.spec.get("authOptions")).get("enableK8sTokenAuth") is True:
        yield Finding(cluster.at + ("authOptions", "enableK8sTokenAuth"), f"K8s token auth is not supported "
                      f"for a {kind}, only for a RayCluster", "k8s-auth")


def _yaml_mapping_problem(text: str) -> str | None:
    """Go unmarshals these strings into map[string]any: any YAML that is not a mapping (or empty) fails."""
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as error:
        return f"is not valid YAML ({str(error).splitlines()[0]})"
    if loaded is not None and not isinstance(loaded, dict):
        return f"must be a YAML mapping, not {_JSON_TYPES.get(type(loaded), type(loaded).__name__)}"
    return None


# ValidateRayJobSpec, validation.go:616-618
# (dashboardclient.UnmarshalRuntimeEnvYAML, dashboard_httpclient.go:382)
def _runtime_env(spec: dict[str, Any]) -> Iterator[Finding]:
    problem = _yaml_mapping_problem(_s(spec.get("runtimeEnvYAML")))
    if problem:
        yield Finding(("spec", "runtimeEnvYAML"), f"runtimeEnvYAML {problem}", "runtime-env-yaml")


# Not a rule of validation.go, but of the K8sJobMode submitter (common/job.go:89-212): its
# command is one string run by `/bin/bash -ce`, with the runtime env as JSON in double quotes
# (Go's strconv.Quote, which escapes `"` and `\` only) and the entrypoint as written. In double
# quotes bash still expands `$` and backquotes, and `!` in an interactive shell: a runtime env
# holding them reaches Ray changed. (An entrypoint is the job's own shell line: quoting it is its
# author's business; orchestrate's is quoted.)
def _submitter_quoting(spec: dict[str, Any]) -> Iterator[Finding]:
    text = _s(spec.get("runtimeEnvYAML"))
    try:
        loaded = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        return   # _runtime_env says so
    as_json = json.dumps(loaded) if loaded is not None else ""
    bad = sorted({c for c in as_json if c in "$`"})
    if bad and spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
        yield Finding(("spec", "runtimeEnvYAML"), "KubeRay's submitter hands the runtime env "
                      "to bash in double quotes, where " + " and ".join(repr(c) for c in bad) +
                      " would be expanded: leave them out of the experiment (its env_vars, its "
                      "settings, its pip lines)",
                      "submitter-quoting")


# ValidateRayJobSpec, validation.go:619-621 (preRunningDeadlineSeconds >= 1, lines 622-624, is in the CRD)
def _job_deadlines(spec: dict[str, Any]) -> Iterator[Finding]:
    deadline = _i(spec.get("activeDeadlineSeconds"))
    if deadline is not None and deadline <= 0:
        yield Finding(("spec", "activeDeadlineSeconds"), "activeDeadlineSeconds must be positive, not "
                      f"{deadline}", "job-deadlines")


def _ray_job(manifest: dict[str, Any], name_ok: bool) -> Iterator[Finding]:
    if name_ok:
        yield from _name("RayJob", manifest)
    spec = _d(manifest.get("spec"))
    for rule in (_job_suspend, _job_ttl, _deletion_strategy, _job_cluster, _sidecar_mode, _runtime_env,
                 _submitter_quoting,
                 _job_deadlines):
        yield from rule(spec)
    if isinstance(spec.get("rayClusterSpec"), dict):
        annotations = _d(_d(manifest.get("metadata")).get("annotations"))
        cluster = _Cluster(spec["rayClusterSpec"], ("spec", "rayClusterSpec"), annotations)
        yield from _no_k8s_auth(cluster, "RayJob")
        yield from _cluster_findings(cluster)
        yield from _embedded_upgrade_strategy(cluster, "RayJob")


_GO_DURATION = re.compile(r"^[-+]?(0|((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+)$")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _go_duration(text: str) -> float | None:
    """Seconds in a Go time.ParseDuration string ("5m", "1h30m"), None when Go would not parse it."""
    if not _GO_DURATION.match(text):
        return None
    sign = -1.0 if text.startswith("-") else 1.0
    parts = re.findall(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)", text)
    return sign * sum(float(n) * _GO_UNITS[u] for n, u in parts)


# validateInitializingTimeout, validation.go:651-678
def _initializing_timeout(manifest: dict[str, Any]) -> Iterator[Finding]:
    value = _d(_d(manifest.get("metadata")).get("annotations")).get("ray.io/initializing-timeout")
    if not isinstance(value, str) or not value:
        return
    at: Path = ("metadata", "annotations", "ray.io/initializing-timeout")
    seconds = _go_duration(value)
    if seconds is None and re.fullmatch(r"[-+]?\d+", value):
        seconds = float(int(value))
    if seconds is None:
        yield Finding(at, f"{value!r} is neither a Go duration (5m, 1h) nor whole seconds",
                      "initializing-timeout")
    elif seconds <= 0:
        yield Finding(at, f"{value!r} must be positive", "initializing-timeout")


# ValidateRayServiceSpec, validation.go:689-705 (the type check of 694-700 is not in the CRD: no enum there)
def _service_spec(spec: dict[str, Any]) -> Iterator[Finding]:
    head_service = _d(_d(_d(spec.get("rayClusterConfig")).get("headGroupSpec")).get("headService"))
    if _d(head_service.get("metadata")).get("name"):
        yield Finding(("spec", "rayClusterConfig", "headGroupSpec", "headService", "metadata", "name"),
                      "a RayService's headService must not set metadata.name; KubeRay names it",
                      "head-service-name")
    kind = _d(spec.get("upgradeStrategy")).get("type")
    allowed = ("NewClusterWithIncrementalUpgrade", "NewCluster", "None")
    if kind is not None and kind not in allowed:
        yield Finding(("spec", "upgradeStrategy", "type"), f"upgradeStrategy.type {kind!r} is not one of "
                      f"{', '.join(allowed)}", "upgrade-strategy")


# ValidateClusterUpgradeOptions, validation.go:717-749, run when the type is NewClusterWithIncrementalUpgrade
# (IsIncrementalUpgradeEnabled, util.go:917; its gate RayServiceIncrementalUpgrade is on by default)
def _incremental_upgrade(spec: dict[str, Any]) -> Iterator[Finding]:
    strategy = _d(spec.get("upgradeStrategy"))
    if strategy.get("type") != "NewClusterWithIncrementalUpgrade":
        return
    at: Path = ("spec", "upgradeStrategy")
    if _d(spec.get("rayClusterConfig")).get("enableInTreeAutoscaling") is not True:
        yield Finding(("spec", "rayClusterConfig", "enableInTreeAutoscaling"),
                      "NewClusterWithIncrementalUpgrade needs enableInTreeAutoscaling: true",
                      "incremental-upgrade")
    options = strategy.get("clusterUpgradeOptions")
    if not isinstance(options, dict):
        yield Finding(at + ("clusterUpgradeOptions",), "NewClusterWithIncrementalUpgrade needs "
                      "clusterUpgradeOptions", "incremental-upgrade")
        return
    at += ("clusterUpgradeOptions",)
    surge = _i(options.get("maxSurgePercent", 100))
    step = _i(options.get("stepSizePercent"))
    interval = _i(options.get("intervalSeconds"))
    if surge is not None and not 0 <= surge <= 100:
        yield Finding(at + ("maxSurgePercent",), "maxSurgePercent must be between 0 and 100",
                      "incremental-upgrade")
    if step is not None and not 0 <= step <= 100:
        yield Finding(at + ("stepSizePercent",), "stepSizePercent must be between 0 and 100",
                      "incremental-upgrade")
    elif step is not None and surge is not None and step > surge:
        yield Finding(at + ("stepSizePercent",), f"stepSizePercent {step} must be <= maxSurgePercent {surge}",
                      "incremental-upgrade")
    if interval is not None and interval <= 0:
        yield Finding(at + ("intervalSeconds",), "intervalSeconds must be greater than 0",
                      "incremental-upgrade")
    if "gatewayClassName" in options and not _s(options.get("gatewayClassName")):
        yield Finding(at + ("gatewayClassName",), "gatewayClassName must not be empty", "incremental-upgrade")


# Not in validation.go: RayServiceReconciler.updateServeDeployment (rayservice_controller.go:1576-1579)
# unmarshals serveConfigV2 into map[string]any before each PUT, and fails the reconcile when it cannot.
def _serve_config(spec: dict[str, Any]) -> Iterator[Finding]:
    problem = _yaml_mapping_problem(_s(spec.get("serveConfigV2")))
    if problem:
        yield Finding(("spec", "serveConfigV2"), f"serveConfigV2 {problem}; KubeRay could never apply it",
                      "serve-config-yaml")


def _ray_service(manifest: dict[str, Any], name_ok: bool) -> Iterator[Finding]:
    if name_ok:
        yield from _name("RayService", manifest)
    yield from _initializing_timeout(manifest)
    spec = _d(manifest.get("spec"))
    annotations = _d(_d(manifest.get("metadata")).get("annotations"))
    cluster = _Cluster(_d(spec.get("rayClusterConfig")), ("spec", "rayClusterConfig"), annotations)
    yield from _no_k8s_auth(cluster, "RayService")
    yield from _cluster_findings(cluster)
    yield from _embedded_upgrade_strategy(cluster, "RayService")
    for rule in (_service_spec, _incremental_upgrade, _serve_config):
        yield from rule(spec)


_OPERATOR: dict[str, Callable[[dict[str, Any], bool], Iterator[Finding]]] = {
    "RayCluster": _ray_cluster,
    "RayJob": _ray_job,
    "RayService": _ray_service,
}
