"""A KubeRay cluster file -> its RayCluster: what the file says, KubeRay accepts, and Ray's own
autoscaler reads back (ray/autoscaler/_private/kuberay/autoscaling_config.py, the code that runs
in the head pod's autoscaler container). The golden file is tests/render/golden/
cluster_configs__kuberay.yaml (tests/render/test_render.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.errors import SpecError
from orchestrator.language.cluster import load_cluster
from orchestrator.launch.kuberay import manifests as kuberay
from orchestrator.launch.kuberay.check import findings
from orchestrator.render.cluster import render_cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "cluster_configs" / "kuberay.yaml"
# aws-gpu.yaml's cluster on Kubernetes, in Ray's own form (available_node_types)
RAY_FORM = """cluster_name: kuberay-gpu
max_workers: 8
idle_timeout_minutes: 10
provider: {type: kuberay, namespace: ml, context: gpu, image: rayproject/ray-ml:2.60.0-gpu}
available_node_types:
  head:
    node_config: {memory: 16Gi}
    resources: {CPU: 0}
  gpu_worker:
    node_config:
      memory: 28Gi
      node_selector: {node.kubernetes.io/instance-type: g5.xlarge}
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
    resources: {CPU: 4, GPU: 1}
    min_workers: 0
    max_workers: 8
head_node_type: head
"""
KUBERAY_CLUSTERS = ["kuberay.yaml", "ray-form"]


def example_file(which: str, tmp_path: Path) -> Path:
    return EXAMPLE if which == "kuberay.yaml" else write(tmp_path, RAY_FORM)


def rendered(path: Path) -> dict:
    return render_cluster(load_cluster(path), token_file="/nowhere").config


def manifest(path: Path = EXAMPLE) -> dict:
    return kuberay.ray_cluster(rendered(path))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


BASE = """cluster_name: k
provider: {type: kuberay, namespace: ml, image: rayproject/ray:2.60.0}
head: {cpus: 1}
"""


@pytest.mark.parametrize("which", KUBERAY_CLUSTERS)
def test_the_example_renders_a_raycluster_kuberay_accepts(which, tmp_path):
    ray_cluster = manifest(example_file(which, tmp_path))
    assert findings(ray_cluster) == []
    assert ray_cluster["kind"] == "RayCluster" and ray_cluster["apiVersion"] == "ray.io/v1"
    assert ray_cluster["metadata"]["namespace"] == "ml"
    assert ray_cluster["spec"]["rayVersion"] == kuberay.RAY_VERSION


def test_the_rendered_ray_version_is_the_one_orchestrate_pins():
    from importlib.metadata import version

    assert version("ray") == kuberay.RAY_VERSION


@pytest.mark.parametrize("which", KUBERAY_CLUSTERS)
def test_rays_own_autoscaler_reads_the_files_node_types_back(which, tmp_path):
    pytest.importorskip("ray")
    from ray.autoscaler._private.kuberay.autoscaling_config import (
        _HEAD_GROUP_NAME,
        _derive_autoscaling_config_from_ray_cr,
    )

    example = example_file(which, tmp_path)
    config = rendered(example)
    read = _derive_autoscaling_config_from_ray_cr(manifest(example))   # and validate_config
    head = config["head_node_type"]
    for name, node_type in config["available_node_types"].items():
        theirs = read["available_node_types"][_HEAD_GROUP_NAME if name == head else name]
        memory = {"8Gi": 8 << 30, "16Gi": 16 << 30, "28Gi": 28 << 30, "32Gi": 32 << 30}[
            node_type["node_config"]["memory"]]   # from the container's memory limit
        assert theirs["resources"] == {**{k: int(v) for k, v in node_type["resources"].items()},
                                       "memory": memory}
        if name != head:
            assert (theirs["min_workers"], theirs["max_workers"]) == \
                (node_type["min_workers"], node_type["max_workers"])
    assert read["idle_timeout_minutes"] == config["idle_timeout_minutes"]
    assert read["max_workers"] == config["max_workers"]


def test_pods_get_the_node_types_cpu_memory_gpu_and_image():
    spec = manifest()["spec"]
    gpu = next(g for g in spec["workerGroupSpecs"] if g["groupName"] == "gpu")
    container = gpu["template"]["spec"]["containers"][0]
    assert container["image"] == "rayproject/ray:2.60.0-py311-gpu"
    assert container["resources"]["limits"] == {"cpu": "8", "memory": "32Gi",
                                                "nvidia.com/gpu": "1"}
    assert gpu["template"]["spec"]["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "g5.2xlarge"}
    assert (gpu["minReplicas"], gpu["maxReplicas"], gpu["replicas"]) == (0, 2, 0)
    head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["image"] == "rayproject/ray:2.60.0-py311-cpu"
    assert {p["containerPort"] for p in head["ports"]} >= {6379, 8265, 10001, 8000}
    assert spec["enableInTreeAutoscaling"] is True
    assert spec["autoscalerOptions"] == {"upscalingMode": "Default", "idleTimeoutSeconds": 600}


def test_token_auth_is_on_and_the_token_is_only_named():
    """The Secret is named, never filled in (tests/render/test_render.py holds `render` to
    never showing a token that exists)."""
    spec = manifest()["spec"]
    assert spec["authOptions"] == {"mode": "token", "secretName": "orchestrate-kuberay-cpu"}


def test_fixed_workers_need_no_autoscaler(tmp_path):
    spec = manifest(write(tmp_path, BASE + "workers: {w: {cpus: 2, min_workers: 2, "
                                           "max_workers: 2}}\n"))["spec"]
    assert "enableInTreeAutoscaling" not in spec and "autoscalerOptions" not in spec
    assert spec["workerGroupSpecs"][0]["replicas"] == 2


def test_render_prints_the_raycluster(capsys):
    assert main(["render", str(EXAMPLE), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == manifest()


@pytest.mark.parametrize("extra, field, words", [
    ("setup_commands: [pip install x]\n", "setup_commands", "Ray's cluster launcher"),
    ("file_mounts: {/a: /b}\n", "file_mounts", "Ray's cluster launcher"),
    ("autostop: {idle_minutes: 5}\n", "autostop", "not available on KubeRay"),
    ("upscaling_speed: 2\n", "upscaling_speed", "Conservative"),
    ("workers: {w: {cpus: 1, spot: true}}\n", "workers.w.spot", "a KubeRay node is a pod"),
    ("workers: {w: {memory: 2Gi}}\n", "workers.w", "missing 'cpus'"),
    ("workers: {w: {cpus: 1, memory: lots}}\n", "workers.w.memory", "Kubernetes quantity"),
])
def test_what_kuberay_cannot_do_is_refused_with_its_line(tmp_path, extra, field, words):
    with pytest.raises(SpecError) as caught:
        load_cluster(write(tmp_path, BASE + extra))
    problems = {p.field: p for p in caught.value.problems}
    assert field in problems, caught.value.problems
    assert words in problems[field].message + (problems[field].hint or "")
    assert problems[field].line is not None


def test_a_name_kubernetes_refuses_is_refused(tmp_path):
    with pytest.raises(SpecError) as caught:
        load_cluster(write(tmp_path, BASE.replace("cluster_name: k", "cluster_name: My_Cluster")))
    (problem,) = caught.value.problems
    assert problem.field == "cluster_name" and problem.line == 1


def test_memory_is_refused_on_a_cloud(tmp_path):
    path = write(tmp_path, "cluster_name: c\nprovider: {type: aws, region: us-west-2}\n"
                           "head: {instance_type: m5.large, memory: 8Gi}\n")
    with pytest.raises(SpecError) as caught:
        load_cluster(path)
    assert [p.field for p in caught.value.problems] == ["head.memory"]


def test_what_kuberay_refuses_in_the_rendered_raycluster_names_the_files_field(tmp_path):
    """A check only KubeRay's CRD makes (a label value Kubernetes refuses) is reported at the
    node type it came from."""
    path = write(tmp_path, BASE + "workers:\n  w:\n    cpus: 1\n    labels: {zone: 'a b'}\n")
    with pytest.raises(SpecError) as caught:
        render_cluster(load_cluster(path), token_file="/nowhere")
    (problem,) = caught.value.problems
    assert problem.field == "workers.w" and problem.line == 5
    assert "RayCluster spec.workerGroupSpecs[0]" in problem.message


def test_the_schema_offers_kuberay_and_memory():
    schema = json.loads((REPO / "schemas" / "cluster.schema.json").read_text())
    assert "kuberay" in schema["properties"]["provider"]["properties"]["type"]["enum"]
    assert "memory" in schema["properties"]["workers"]["patternProperties"][
        "^[A-Za-z][A-Za-z0-9_-]{0,39}$"]["properties"]


def test_example_file_is_valid_yaml_with_its_schema_line():
    assert EXAMPLE.read_text().startswith("# yaml-language-server: $schema=")
    assert yaml.safe_load(EXAMPLE.read_text())["provider"]["type"] == "kuberay"


# --- every example experiment as a RayJob, every example service as a RayService ---

KUBERAY_GOLDEN = Path(__file__).parent / "golden-kuberay"
EXPERIMENTS = sorted(REPO.glob("experiments/*.yaml"))
SERVICES = sorted(REPO.glob("services/*.yaml"))
STORE = "s3://example-bucket/orchestrate"


def as_rayjob(path: Path) -> dict:
    """The example's RayJob on the KubeRay example cluster (its own `own_cluster`, if any)."""
    from dataclasses import replace

    from orchestrator.language.experiment import load_experiment
    from orchestrator.render.experiment import render_job, ship
    from orchestrator.run import rayjob

    spec = load_experiment(path, here=False)
    own = spec.document.get("own_cluster") or {"package_store": STORE}
    spec = replace(spec, cluster=load_cluster(EXAMPLE),
                   document={**spec.document, "own_cluster": own})
    shipped = ship(spec)
    return rayjob.manifest(spec, render_job(spec, shipped), shipped)


def as_rayservice(path: Path, **settings) -> dict:
    """The example's RayService on the KubeRay example cluster (`settings` over its own)."""
    from dataclasses import replace

    from orchestrator.commands.render import render_service
    from orchestrator.language.service import load_service

    spec = load_service(path, here=False)
    spec = replace(spec, cluster=load_cluster(EXAMPLE),
                   document={**spec.document, "package_store": STORE, **settings})
    return render_service(spec)


def stable(document: dict) -> str:
    """The golden text: the package's digest (it changes with any of orchestrate's code) and
    this checkout's path left out."""
    import re

    text = yaml.safe_dump(document, sort_keys=False, width=100)
    text = re.sub(r"orchestrate-[0-9a-f]{24}\.zip", "orchestrate-<digest>.zip", text)
    return text.replace(str(REPO), "<repo>")


def check_golden(name: str, text: str) -> None:
    import os

    golden = KUBERAY_GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        KUBERAY_GOLDEN.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}; run with UPDATE_GOLDEN=1"
    assert text == golden.read_text()


@pytest.mark.parametrize("example", EXPERIMENTS, ids=lambda p: p.name)
def test_every_example_experiment_renders_a_rayjob_kuberay_accepts(example, monkeypatch):
    monkeypatch.setenv("ORCHESTRATE_HOME", "/ORCHESTRATE_HOME")
    job = as_rayjob(example)   # SpecError if KubeRay would refuse it
    assert findings(job) == []
    assert job["spec"]["entrypoint"] == "python -m orchestrator.workload"
    env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert env["py_modules"][0].startswith(STORE + "/orchestrate-") or \
        env["py_modules"][0].startswith("s3://my-team-ray-packages/")
    assert "excludes" not in env and "://" in env["working_dir"]
    check_golden(f"experiments__{example.name}", stable(job))


@pytest.mark.parametrize("example", SERVICES, ids=lambda p: p.name)
def test_every_example_service_renders_a_rayservice_kuberay_accepts(example, monkeypatch):
    monkeypatch.setenv("ORCHESTRATE_HOME", "/ORCHESTRATE_HOME")
    service = as_rayservice(example)
    assert findings(service) == []
    config = json.loads(service["spec"]["serveConfigV2"])   # JSON: YAML as Go reads it
    (application,) = config["applications"]
    assert application["runtime_env"]["py_modules"][0].startswith(STORE + "/orchestrate-")
    assert config["http_options"]["host"] == "0.0.0.0"
    check_golden(f"services__{example.name}", stable(service))


def test_a_rayservice_names_its_http_port_serve(monkeypatch):
    """A service on another http_port than Serve's 8000: the head's port named `serve`, which
    KubeRay's probes and serve Service use, is that port."""
    monkeypatch.setenv("ORCHESTRATE_HOME", "/ORCHESTRATE_HOME")
    service = as_rayservice(SERVICES[0], http_port=8123)
    head = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    ports = {p["name"]: p["containerPort"] for p in head["containers"][0]["ports"]}
    assert ports["serve"] == 8123 and ports["dashboard"] == 8265
    assert json.loads(service["spec"]["serveConfigV2"])["http_options"]["port"] == 8123
    assert findings(service) == []


def test_every_kuberay_golden_file_has_an_example():
    expected = {f"experiments__{p.name}" for p in EXPERIMENTS} | \
        {f"services__{p.name}" for p in SERVICES}
    assert {p.name for p in KUBERAY_GOLDEN.iterdir()} == expected


def test_a_rayjob_keeps_a_failed_runs_head_and_deletes_a_success():
    job = as_rayjob(REPO / "experiments" / "quickstart-kuberay.yaml")
    spec = job["spec"]
    assert spec["deletionStrategy"] == {"deletionRules": [
        {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 60}},
        {"policy": "DeleteCluster", "condition": {"jobStatus": "FAILED", "ttlSeconds": 3600}},
        # a submitter that failed, a head lost: no jobStatus FAILED, and still deleted
        {"policy": "DeleteCluster",
         "condition": {"jobDeploymentStatus": "Failed", "ttlSeconds": 3600}}]}
    assert "shutdownAfterJobFinishes" not in spec   # KubeRay refuses it beside deletionRules
    name = job["metadata"]["name"]
    assert spec["rayClusterSpec"]["authOptions"]["secretName"] == f"orchestrate-{name}"
    assert len(name) <= 47


def test_yaml_fields_kuberay_reads_with_go_are_json_every_string_quoted(tmp_path):
    """Go's YAML (sigs.k8s.io/yaml) takes an unquoted 1e-4 for a number; PyYAML writes the
    string 1e-4 unquoted. JSON is YAML, and quotes every string."""
    from orchestrator.render.experiment import JobPlan

    plan = JobPlan(entrypoint="x", runtime_env={"env_vars": {"LR": "1e-4", "MODE": "0o17"}},
                   config={"name": "e"}, submission_id="orchestrate-e-0123456789ab")
    job = kuberay.ray_job(plan, rendered(EXAMPLE), {"package_store": STORE},
                          {"orchestrate": f"{STORE}/o.zip"})
    text = job["spec"]["runtimeEnvYAML"]
    assert json.loads(text)["env_vars"] == {"LR": "1e-4", "MODE": "0o17"}
    assert '"LR": "1e-4"' in text


def test_a_rayjob_that_keeps_nothing_is_shut_down_after_its_ttl(tmp_path):
    from dataclasses import replace

    from orchestrator.language.experiment import load_experiment
    from orchestrator.render.experiment import render_job, ship
    from orchestrator.run import rayjob

    spec = load_experiment(REPO / "experiments" / "quickstart-kuberay.yaml", here=False)
    own = {"package_store": STORE, "delete_after_seconds": 30, "keep_failed_seconds": 0}
    spec = replace(spec, document={**spec.document, "own_cluster": own})
    shipped = ship(spec)
    job = rayjob.manifest(spec, render_job(spec, shipped), shipped)["spec"]
    assert (job["shutdownAfterJobFinishes"], job["ttlSecondsAfterFinished"]) == (True, 30)
    assert "deletionStrategy" not in job


def test_fixed_workers_are_freed_at_once_when_a_run_fails(tmp_path):
    from orchestrator.render.experiment import JobPlan

    path = write(tmp_path, BASE + "workers: {w: {cpus: 2, min_workers: 2, max_workers: 2}}\n")
    plan = JobPlan(entrypoint="x", runtime_env={"working_dir": "/w"}, config={"name": "e"},
                   submission_id="orchestrate-e-0123456789ab")
    job = kuberay.ray_job(plan, rendered(path), {"package_store": STORE},
                          {"working_dir": f"{STORE}/w.zip", "orchestrate": f"{STORE}/o.zip"})
    assert findings(job) == []
    assert job["spec"]["deletionStrategy"]["deletionRules"][1] == {
        "policy": "DeleteWorkers", "condition": {"jobStatus": "FAILED", "ttlSeconds": 0}}
    assert job["metadata"]["name"] == "e-0123456789ab"


def test_own_cluster_needs_a_kuberay_cluster(tmp_path):
    from orchestrator.language.experiment import load_experiment

    (tmp_path / "c.yaml").write_text("cluster_name: c\nprovider: {type: local, head_ip: 10.0.0.1, "
                                     "worker_ips: []}\nauth: {ssh_user: u}\n")
    path = tmp_path / "e.yaml"
    path.write_text("name: e\ntrainer: xgboost\ncluster: c.yaml\nlabel_column: y\n"
                    "datasets: {train: {path: s3://b/t.csv}}\n"
                    "own_cluster: {package_store: s3://bucket/p}\n")
    with pytest.raises(SpecError) as caught:
        load_experiment(path, here=False)
    (problem,) = [p for p in caught.value.problems if p.field == "own_cluster"]
    assert "KubeRay cluster" in problem.message and problem.line == 6


def test_a_runtime_env_bash_would_change_is_refused(tmp_path):
    from orchestrator.render.experiment import JobPlan

    plan = JobPlan(entrypoint="x", runtime_env={"env_vars": {"PRICE": "$5"}},
                   config={"name": "e"}, submission_id="orchestrate-e-0123456789ab")
    job = kuberay.ray_job(plan, rendered(EXAMPLE), {"package_store": STORE},
                          {"orchestrate": f"{STORE}/o.zip"})
    (finding,) = findings(job)
    assert finding.path == ("spec", "runtimeEnvYAML") and "'$'" in finding.message


def test_kubeconfig_files_in_the_working_dir_are_never_shipped(tmp_path, monkeypatch):
    from orchestrator.language.experiment import load_experiment
    from orchestrator.render.experiment import ship

    (tmp_path / "kind-config").write_text("users: [{user: {client-key-data: c2VjcmV0}}]\n")
    (tmp_path / "train.csv").write_text("a,target\n1,0\n")
    path = tmp_path / "e.yaml"
    path.write_text("name: e\ntrainer: xgboost\nlabel_column: target\n"
                    "datasets: {train: {path: train.csv}}\n")
    monkeypatch.setenv("KUBECONFIG", f"/elsewhere/config:{tmp_path / 'kind-config'}")
    shipped = {name for name, _ in ship(load_experiment(path)).files}
    assert "train.csv" in shipped and "kind-config" not in shipped
