"""launch.kuberay.check: valid RayCluster/RayJob/RayService pass; each CRD and operator rule fails
where it should.

Fast tier: no Ray, no network. The three CRDs are loaded once per process (lru_cache), ~1 s in all.
"""
from __future__ import annotations

import copy
from typing import Any

import pytest

from orchestrator.launch.kuberay.check import Finding, findings, to_json_schema


def _container(name: str) -> dict[str, Any]:
    return {"name": name, "image": "rayproject/ray:2.52.0",
            "resources": {"limits": {"cpu": 1, "memory": "2Gi"},
                          "requests": {"cpu": "500m", "memory": "2Gi"}}}


def _cluster_spec() -> dict[str, Any]:
    return {
        "rayVersion": "2.52.0",
        "headGroupSpec": {"rayStartParams": {},
                          "template": {"spec": {"containers": [_container("ray-head")]}}},
        "workerGroupSpecs": [{
            "groupName": "cpu", "replicas": 1, "minReplicas": 0, "maxReplicas": 2, "rayStartParams": {},
            "template": {"spec": {"containers": [_container("ray-worker")]}},
        }],
    }


def ray_cluster() -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "demo", "namespace": "team-a", "labels": {"app.kubernetes.io/name": "demo"}},
            "spec": _cluster_spec()}


def ray_job() -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "train"},
            "spec": {"entrypoint": "python train.py", "runtimeEnvYAML": "pip: [numpy]\nworking_dir: .",
                     "shutdownAfterJobFinishes": True, "ttlSecondsAfterFinished": 60,
                     "rayClusterSpec": _cluster_spec()}}


def ray_service() -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "serve"},
            "spec": {"serveConfigV2": "applications:\n- name: app\n  import_path: app:deployment\n",
                     "rayClusterConfig": _cluster_spec()}}


def only(manifest: dict[str, Any]) -> Finding:
    found = findings(manifest)
    assert len(found) == 1, found
    return found[0]


WORKER = ("spec", "workerGroupSpecs", 0)
HEAD_ENV = ("spec", "headGroupSpec", "template", "spec", "containers", 0, "env")


# ---------------------------------------------------------------- valid resources

@pytest.mark.parametrize("make", [ray_cluster, ray_job, ray_service])
def test_valid_minimal_resources_have_no_findings(make):
    assert findings(make()) == []


def test_quantities_as_int_or_string_are_accepted():
    manifest = ray_cluster()
    manifest["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": 1, "memory": "2Gi", "nvidia.com/gpu": 1},
        "requests": {"cpu": "500m", "memory": 2147483648}}
    assert findings(manifest) == []


# ---------------------------------------------------------------- the CRD schema

def test_unknown_field_is_reported_as_dropped_with_its_path():
    manifest = ray_cluster()
    manifest["spec"]["workerGroupSpecs"][0]["maxReplica"] = 3
    finding = only(manifest)
    assert finding.path == WORKER + ("maxReplica",)
    assert finding.rule == "schema"
    assert "not a field of RayCluster's spec.workerGroupSpecs[0]" in finding.message
    assert "would drop it" in finding.message and "did you mean 'maxReplicas'" in finding.message


def test_unknown_field_in_the_pod_template_metadata():
    manifest = ray_cluster()
    manifest["spec"]["headGroupSpec"]["template"]["metadata"] = {"labels": {"a": "b"}, "generateName": "x-"}
    finding = only(manifest)
    assert finding.path == ("spec", "headGroupSpec", "template", "metadata", "generateName")


def test_wrong_type_is_reported_at_its_path():
    manifest = ray_cluster()
    manifest["spec"]["workerGroupSpecs"][0]["replicas"] = "1"
    finding = only(manifest)
    assert finding.path == WORKER + ("replicas",)
    assert finding.message == "must be an integer, not a string '1'"


def test_float_quantity_is_refused_as_not_int_or_string():
    manifest = ray_cluster()
    manifest["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = 0.5
    finding = only(manifest)
    assert finding.path[-2:] == ("limits", "cpu")
    assert "integer or a string" in finding.message and '"500m"' in finding.message


def test_malformed_quantity_string():
    manifest = ray_cluster()
    limits = manifest["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits["memory"] = "2 GB"
    finding = only(manifest)
    assert finding.path[-1] == "memory" and "not a Kubernetes quantity" in finding.message


def test_enum_lists_the_allowed_values():
    manifest = ray_cluster()
    manifest["spec"]["upgradeStrategy"] = {"type": "Rolling"}
    finding = only(manifest)
    assert finding.path == ("spec", "upgradeStrategy", "type")
    assert finding.message == "'Rolling' is not one of 'Recreate', 'None'"


def test_required_field_missing_points_at_the_field():
    manifest = ray_cluster()
    del manifest["spec"]["workerGroupSpecs"][0]["groupName"]
    finding = only(manifest)
    assert finding.path == WORKER + ("groupName",)
    assert "'groupName' is required" in finding.message


def test_required_with_a_default_is_not_required():
    manifest = ray_cluster()
    del manifest["spec"]["workerGroupSpecs"][0]["minReplicas"]
    del manifest["spec"]["workerGroupSpecs"][0]["maxReplicas"]
    assert findings(manifest) == []


def test_int32_range():
    manifest = ray_cluster()
    manifest["spec"]["workerGroupSpecs"][0]["maxReplicas"] = 2**31
    finding = only(manifest)
    assert finding.path == WORKER + ("maxReplicas",)
    assert finding.message == f"must be at most {2**31 - 1}, not {2**31}"


def test_null_field_is_dropped():
    manifest = ray_cluster()
    manifest["spec"]["enableInTreeAutoscaling"] = None
    finding = only(manifest)
    assert finding.path == ("spec", "enableInTreeAutoscaling") and "null" in finding.message


def test_duplicate_container_names_in_a_list_map():
    manifest = ray_cluster()
    manifest["spec"]["headGroupSpec"]["template"]["spec"]["containers"].append(_container("ray-head"))
    finding = only(manifest)
    assert finding.path == ("spec", "headGroupSpec", "template", "spec", "containers", 1)
    assert "duplicate entry (name='ray-head')" in finding.message


def test_cel_managed_by():
    manifest = ray_cluster()
    manifest["spec"]["managedBy"] = "someone"
    finding = only(manifest)
    assert finding.path == ("spec", "managedBy") and "ray.io/kuberay-operator" in finding.message


def test_api_version_and_kind():
    manifest = ray_cluster()
    manifest["apiVersion"] = "ray.io/v1alpha1"
    assert only(manifest).path == ("apiVersion",)
    assert findings({"kind": "RayThing"})[0].path == ("kind",)


def test_translation_of_the_extensions():
    node = {"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "integer", "format": "int32", "default": 1},
        "b": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
        "c": {"type": "string", "nullable": True, "format": "date-time"}}}
    schema = to_json_schema(node)
    assert schema["required"] == ["b"]
    assert schema["properties"]["a"] == {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
    assert schema["properties"]["b"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert schema["properties"]["c"] == {"type": ["string", "null"]}


# ---------------------------------------------------------------- metadata

def test_metadata_name_must_be_a_dns_subdomain():
    manifest = ray_cluster()
    manifest["metadata"]["name"] = "Demo_1"
    finding = only(manifest)
    assert finding.path == ("metadata", "name") and finding.rule == "metadata"
    assert "DNS-1123 subdomain" in finding.message


def test_metadata_labels_and_unknown_fields():
    manifest = ray_cluster()
    manifest["metadata"]["labels"] = {"bad key": "ok", "fine": "x" * 64}
    manifest["metadata"]["lables"] = {}
    paths = {f.path for f in findings(manifest)}
    assert paths == {("metadata", "labels", "bad key"), ("metadata", "labels", "fine"),
                     ("metadata", "lables")}


@pytest.mark.parametrize(("make", "limit"), [(ray_cluster, 53), (ray_job, 47), (ray_service, 47)])
def test_operator_name_length(make, limit):
    manifest = make()
    manifest["metadata"]["name"] = "a" * (limit + 1)
    finding = only(manifest)
    assert finding.path == ("metadata", "name") and finding.rule == "name"
    assert f"at most {limit}" in finding.message


def test_operator_name_must_be_a_dns1035_label():
    manifest = ray_cluster()
    manifest["metadata"]["name"] = "1demo"
    finding = only(manifest)
    assert finding.rule == "name" and "DNS-1035" in finding.message


# ---------------------------------------------------------------- RayCluster spec rules

def _cluster_with(change) -> dict[str, Any]:
    manifest = ray_cluster()
    change(manifest["spec"])
    return manifest


def _worker(spec):
    return spec["workerGroupSpecs"][0]


def _head_container(spec):
    return spec["headGroupSpec"]["template"]["spec"]["containers"][0]


CLUSTER_CASES = [
    ("head-containers", lambda s: s["headGroupSpec"]["template"]["spec"].update(containers=[]),
     ("spec", "headGroupSpec", "template", "spec", "containers"), "at least one container"),
    ("worker-containers", lambda s: _worker(s)["template"]["spec"].update(containers=[]),
     WORKER + ("template", "spec", "containers"), "at least one container"),
    ("worker-replicas", lambda s: _worker(s).update(minReplicas=3),
     WORKER + ("minReplicas",), "minReplicas 3 greater than maxReplicas 2"),
    ("worker-replicas", lambda s: _worker(s).update(minReplicas=-1),
     WORKER + ("minReplicas",), "negative minReplicas -1"),
    ("worker-group-names", lambda s: s["workerGroupSpecs"].append(copy.deepcopy(_worker(s))),
     ("spec", "workerGroupSpecs", 1, "groupName"), "'cpu' is used twice"),
    ("group-resources", lambda s: _worker(s).update(rayStartParams={"num-cpus": "2"}, resources={"CPU": "2"}),
     WORKER + ("resources",), "both in rayStartParams (num-cpus) and in resources"),
    ("group-labels", lambda s: s["headGroupSpec"].update(rayStartParams={"labels": "a=b"}),
     ("spec", "headGroupSpec", "rayStartParams", "labels"), "use the group's labels field"),
    ("group-labels", lambda s: _worker(s).update(labels={"zone": "us east"}),
     WORKER + ("labels", "zone"), "cpu group: label 'zone'"),
    ("idle-timeout", lambda s: _worker(s).update(idleTimeoutSeconds=60),
     WORKER + ("idleTimeoutSeconds",), "needs autoscaler v2"),
    ("worker-priority", lambda s: _worker(s).update(priority=1),
     WORKER + ("priority",), "rayVersion 2.56.0 or later"),
    ("gcs-ft", lambda s: _head_container(s).update(env=[{"name": "RAY_REDIS_ADDRESS", "value": "r:6379"}]),
     HEAD_ENV, "set gcsFaultToleranceOptions instead"),
    ("gcs-ft", lambda s: s.update(gcsFaultToleranceOptions={"redisAddress": "redis:6379"})
     or s["headGroupSpec"]["rayStartParams"].update({"redis-password": "x"}),
     ("spec", "headGroupSpec", "rayStartParams", "redis-password"), "use its redisPassword"),
    ("gcs-ft", lambda s: s.update(gcsFaultToleranceOptions={"backend": "rocksdb", "redisAddress": "r:6379"}),
     ("spec", "gcsFaultToleranceOptions", "redisAddress"), "refused with backend rocksdb"),
    ("gcs-ft", lambda s: s["headGroupSpec"]["rayStartParams"].update({"redis-username": "u"}),
     ("spec", "headGroupSpec"), "gcsFaultToleranceOptions.redisUsername"),
    ("autoscaler",
     lambda s: _head_container(s).update(env=[{"name": "RAY_enable_autoscaler_v2", "value": "1"}]),
     HEAD_ENV, "enableInTreeAutoscaling is not true"),
    ("autoscaler", lambda s: s.update(enableInTreeAutoscaling=True) or _worker(s).update(suspend=True),
     WORKER + ("suspend",), "cannot be suspended with the autoscaler"),
    ("autoscaler", lambda s: s.update(enableInTreeAutoscaling=True, autoscalerOptions={"version": "v2"})
     or s["headGroupSpec"]["template"]["spec"].update(restartPolicy="Always"),
     ("spec", "headGroupSpec", "template", "spec", "restartPolicy"), "must be Never or unset"),
    ("autoscaler-options", lambda s: s.update(autoscalerOptions={"idleTimeoutSeconds": -1}),
     ("spec", "autoscalerOptions", "idleTimeoutSeconds"), "must be 0 or more"),
    ("autoscaler-options", lambda s: s.update(
        autoscalerOptions={"env": [{"name": "KUBERAY_GEN_AUTOSCALER_START_CMD", "value": "x"}]}),
     ("spec", "autoscalerOptions", "env"), "KubeRay injects it"),
    ("auth", lambda s: s.update(authOptions={"mode": "token"}, rayVersion="2.46.0"),
     ("spec", "rayVersion"), "needs rayVersion 2.52.0 or later"),
    ("auth", lambda s: s.update(authOptions={"mode": "disabled", "enableK8sTokenAuth": True}),
     ("spec", "authOptions", "enableK8sTokenAuth"), "needs authOptions.mode: token"),
    ("auth", lambda s: s.update(rayVersion="2.55.0",
                                authOptions={"mode": "token", "enableK8sTokenAuth": True, "secretName": "t"}),
     ("spec", "authOptions", "secretName"), "exclude each other"),
]


@pytest.mark.parametrize(("rule", "change", "path", "words"), CLUSTER_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CLUSTER_CASES)])
def test_cluster_rule(rule, change, path, words):
    finding = only(_cluster_with(change))
    assert (finding.rule, finding.path) == (rule, path)
    assert words in finding.message


def test_token_auth_with_a_recent_ray_passes():
    manifest = _cluster_with(lambda s: s.update(authOptions={"mode": "token", "secretName": "tok"}))
    assert findings(manifest) == []


def test_ft_annotation_and_options_together():
    manifest = _cluster_with(lambda s: s.update(gcsFaultToleranceOptions={"redisAddress": "redis:6379"}))
    manifest["metadata"]["annotations"] = {"ray.io/ft-enabled": "true"}
    finding = only(manifest)
    assert finding.rule == "gcs-ft" and "use only gcsFaultToleranceOptions" in finding.message


def test_upgrade_strategy_on_a_cluster_from_a_rayjob():
    manifest = _cluster_with(lambda s: s.update(upgradeStrategy={"type": "Recreate"}))
    assert findings(manifest) == []
    manifest["metadata"]["labels"]["ray.io/originated-from-crd"] = "RayJob"
    assert only(manifest).rule == "cluster-upgrade-strategy"


# ---------------------------------------------------------------- RayJob spec rules

def _job_with(change) -> dict[str, Any]:
    manifest = ray_job()
    change(manifest["spec"])
    return manifest


def _selector(spec, **extra):
    del spec["rayClusterSpec"]
    spec.update(clusterSelector={"ray.io/cluster": "shared"}, **extra)


JOB_CASES = [
    ("job-suspend",
     lambda s: s.update(suspend=True, shutdownAfterJobFinishes=False, ttlSecondsAfterFinished=0),
     ("spec", "suspend"), "only with shutdownAfterJobFinishes: true"),
    ("job-ttl", lambda s: s.update(shutdownAfterJobFinishes=False),
     ("spec", "ttlSecondsAfterFinished"), "needs shutdownAfterJobFinishes: true"),
    ("job-ttl", lambda s: s.update(ttlSecondsAfterFinished=-1),
     ("spec", "ttlSecondsAfterFinished"), "must be 0 or more"),
    ("job-cluster", lambda s: s.pop("rayClusterSpec"), ("spec",), "needs rayClusterSpec or clusterSelector"),
    ("job-cluster", lambda s: _selector(s) or s["clusterSelector"].update({"ray.io/cluster": ""}),
     ("spec", "clusterSelector", "ray.io/cluster"), "non-empty ray.io/cluster"),
    ("job-cluster", lambda s: _selector(s, submissionMode="SidecarMode"),
     ("spec", "submissionMode"), "refused in SidecarMode"),
    ("job-backoff", lambda s: _selector(s, backoffLimit=2), ("spec", "backoffLimit"), "with clusterSelector"),
    ("job-backoff", lambda s: s.update(submissionMode="InteractiveMode", backoffLimit=1),
     ("spec", "backoffLimit"), "refused in InteractiveMode"),
    ("job-backoff", lambda s: s.update(backoffLimit=-1), ("spec", "backoffLimit"), "must be 0 or more"),
    ("sidecar-mode", lambda s: s.update(submissionMode="SidecarMode", submitterConfig={"backoffLimit": 1}),
     ("spec", "submitterConfig"), "SidecarMode does not support submitterConfig"),
    ("sidecar-mode", lambda s: s.update(submissionMode="SidecarMode")
     or s["rayClusterSpec"]["headGroupSpec"]["template"]["spec"].update(restartPolicy="Always"),
     ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "restartPolicy"), "Never or unset"),
    ("k8s-auth", lambda s: s["rayClusterSpec"].update(
        rayVersion="2.55.0", authOptions={"mode": "token", "enableK8sTokenAuth": True}),
     ("spec", "rayClusterSpec", "authOptions", "enableK8sTokenAuth"), "not supported for a RayJob"),
    ("runtime-env-yaml", lambda s: s.update(runtimeEnvYAML="pip: [numpy"),
     ("spec", "runtimeEnvYAML"), "is not valid YAML"),
    ("runtime-env-yaml", lambda s: s.update(runtimeEnvYAML="- numpy"),
     ("spec", "runtimeEnvYAML"), "must be a YAML mapping, not a list"),
    ("job-deadlines", lambda s: s.update(activeDeadlineSeconds=0),
     ("spec", "activeDeadlineSeconds"), "must be positive"),
    ("deletion-strategy", lambda s: s.update(
        ttlSecondsAfterFinished=0, deletionStrategy={"deletionRules": [
            {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED"}}]}),
     ("spec", "deletionStrategy", "deletionRules"), "exclude each other"),
    ("deletion-strategy", lambda s: s.update(deletionStrategy={
        "onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteNone"}}),
     ("spec", "deletionStrategy", "onFailure", "policy"), "DeleteNone contradicts shutdownAfterJobFinishes"),
    ("deletion-strategy",
     lambda s: s.update(deletionStrategy={"onSuccess": {}, "onFailure": {"policy": "DeleteSelf"}}),
     ("spec", "deletionStrategy", "onSuccess", "policy"), "onSuccess.policy must be set"),
    ("deletion-rules", lambda s: s.update(shutdownAfterJobFinishes=False, ttlSecondsAfterFinished=0,
                                          deletionStrategy={"deletionRules": [
                                              {"policy": "DeleteCluster", "condition": {"jobStatus": "FAILED",
                                                                                        "ttlSeconds": 60}},
                                              {"policy": "DeleteSelf", "condition": {"jobStatus": "FAILED",
                                                                                     "ttlSeconds": 30}}]}),
     ("spec", "deletionStrategy", "deletionRules"), "DeleteSelf ttlSeconds (30) must be >= DeleteCluster"),
    ("deletion-rules", lambda s: s.update(shutdownAfterJobFinishes=False, ttlSecondsAfterFinished=0,
                                          deletionStrategy={"deletionRules": [
                                              {"policy": "DeleteSelf", "condition": {"jobStatus": "FAILED"}},
                                              {"policy": "DeleteSelf",
                                               "condition": {"jobStatus": "FAILED"}}]}),
     ("spec", "deletionStrategy", "deletionRules", 1), "a second DeleteSelf rule"),
    ("deletion-rules", lambda s: s["rayClusterSpec"].update(enableInTreeAutoscaling=True) or s.update(
        shutdownAfterJobFinishes=False, ttlSecondsAfterFinished=0, deletionStrategy={"deletionRules": [
            {"policy": "DeleteWorkers", "condition": {"jobStatus": "SUCCEEDED"}}]}),
     ("spec", "deletionStrategy", "deletionRules", 0, "policy"), "refused with enableInTreeAutoscaling"),
    ("cluster-upgrade-strategy", lambda s: s["rayClusterSpec"].update(upgradeStrategy={"type": "Recreate"}),
     ("spec", "rayClusterSpec", "upgradeStrategy", "type"), "RayCluster a RayJob creates"),
    ("worker-replicas", lambda s: s["rayClusterSpec"]["workerGroupSpecs"][0].update(minReplicas=5),
     ("spec", "rayClusterSpec", "workerGroupSpecs", 0, "minReplicas"), "greater than maxReplicas"),
]


@pytest.mark.parametrize(("rule", "change", "path", "words"), JOB_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(JOB_CASES)])
def test_job_rule(rule, change, path, words):
    finding = only(_job_with(change))
    assert (finding.rule, finding.path) == (rule, path)
    assert words in finding.message


def test_valid_deletion_rules_and_cluster_selector_pass():
    def rules(spec):
        spec.update(shutdownAfterJobFinishes=False, ttlSecondsAfterFinished=0,
                    deletionStrategy={"deletionRules": [
            {"policy": "DeleteWorkers", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 10}},
            {"policy": "DeleteSelf", "condition": {"jobDeploymentStatus": "Failed", "ttlSeconds": 600}}]})
    assert findings(_job_with(rules)) == []
    selector = _job_with(lambda s: _selector(s, shutdownAfterJobFinishes=False, ttlSecondsAfterFinished=0))
    assert findings(selector) == []


@pytest.mark.parametrize(("strategy", "words"), [
    ({"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteCluster"},
      "deletionRules": [{"policy": "DeleteSelf", "condition": {"jobStatus": "FAILED"}}]},
     "cannot be used together"),
    ({"onSuccess": {"policy": "DeleteCluster"}}, "requires either BOTH onSuccess and onFailure"),
])
def test_deletion_strategy_cel_rules(strategy, words):
    finding = only(_job_with(lambda s: s.update(shutdownAfterJobFinishes=False, ttlSecondsAfterFinished=0,
                                                deletionStrategy=strategy)))
    assert finding.path == ("spec", "deletionStrategy") and finding.rule == "schema"
    assert words in finding.message


def test_deletion_condition_cel_rule():
    strategy = {"deletionRules": [{"policy": "DeleteSelf", "condition": {"ttlSeconds": 5}}]}
    finding = only(_job_with(lambda s: s.update(shutdownAfterJobFinishes=False, ttlSecondsAfterFinished=0,
                                                deletionStrategy=strategy)))
    assert finding.path == ("spec", "deletionStrategy", "deletionRules", 0, "condition")
    assert "requires either the JobStatus or the JobDeploymentStatus" in finding.message


# ---------------------------------------------------------------- RayService spec rules

def _service_with(change) -> dict[str, Any]:
    manifest = ray_service()
    change(manifest["spec"])
    return manifest


def _incremental(spec, **options):
    spec["rayClusterConfig"]["enableInTreeAutoscaling"] = True
    base = {"gatewayClassName": "istio", "intervalSeconds": 30, "stepSizePercent": 10, "maxSurgePercent": 50}
    spec["upgradeStrategy"] = {"type": "NewClusterWithIncrementalUpgrade",
                               "clusterUpgradeOptions": base | options}


SERVICE_CASES = [
    ("serve-config-yaml", lambda s: s.update(serveConfigV2="applications: [\n"),
     ("spec", "serveConfigV2"), "is not valid YAML"),
    ("upgrade-strategy", lambda s: s.update(upgradeStrategy={"type": "Rolling"}),
     ("spec", "upgradeStrategy", "type"), "is not one of NewClusterWithIncrementalUpgrade, NewCluster, None"),
    ("head-service-name", lambda s: s["rayClusterConfig"]["headGroupSpec"].update(
        headService={"metadata": {"name": "mine"}}),
     ("spec", "rayClusterConfig", "headGroupSpec", "headService", "metadata", "name"), "must not set"),
    ("incremental-upgrade", lambda s: _incremental(s) or s["rayClusterConfig"].pop("enableInTreeAutoscaling"),
     ("spec", "rayClusterConfig", "enableInTreeAutoscaling"), "needs enableInTreeAutoscaling: true"),
    ("incremental-upgrade", lambda s: _incremental(s, stepSizePercent=60),
     ("spec", "upgradeStrategy", "clusterUpgradeOptions", "stepSizePercent"),
     "must be <= maxSurgePercent 50"),
    ("incremental-upgrade", lambda s: _incremental(s, intervalSeconds=0),
     ("spec", "upgradeStrategy", "clusterUpgradeOptions", "intervalSeconds"), "greater than 0"),
    ("incremental-upgrade", lambda s: _incremental(s, maxSurgePercent=150),
     ("spec", "upgradeStrategy", "clusterUpgradeOptions", "maxSurgePercent"), "between 0 and 100"),
    ("k8s-auth", lambda s: s["rayClusterConfig"].update(
        rayVersion="2.55.0", authOptions={"mode": "token", "enableK8sTokenAuth": True}),
     ("spec", "rayClusterConfig", "authOptions", "enableK8sTokenAuth"), "not supported for a RayService"),
    ("group-resources", lambda s: s["rayClusterConfig"]["headGroupSpec"].update(
        rayStartParams={"num-gpus": "1"}, resources={"GPU": "1"}),
     ("spec", "rayClusterConfig", "headGroupSpec", "resources"), "Head group sets resources"),
]


@pytest.mark.parametrize(("rule", "change", "path", "words"), SERVICE_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(SERVICE_CASES)])
def test_service_rule(rule, change, path, words):
    finding = only(_service_with(change))
    assert (finding.rule, finding.path) == (rule, path)
    assert words in finding.message


def test_valid_incremental_upgrade_passes():
    assert findings(_service_with(_incremental)) == []


@pytest.mark.parametrize(("value", "ok"), [("5m", True), ("300", True), ("1h30m", True), ("0s", False),
                                           ("-5", False), ("soon", False)])
def test_initializing_timeout_annotation(value, ok):
    manifest = ray_service()
    manifest["metadata"]["annotations"] = {"ray.io/initializing-timeout": value}
    found = findings(manifest)
    assert (found == []) is ok
    if not ok:
        assert found[0].rule == "initializing-timeout"
        assert found[0].path == ("metadata", "annotations", "ray.io/initializing-timeout")
