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
from orchestrator.providers.kuberay_check import findings
from orchestrator.render import kuberay
from orchestrator.render.cluster import render_cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "cluster_configs" / "kuberay.yaml"


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


def test_the_example_renders_a_raycluster_kuberay_accepts():
    ray_cluster = manifest()
    assert findings(ray_cluster) == []
    assert ray_cluster["kind"] == "RayCluster" and ray_cluster["apiVersion"] == "ray.io/v1"
    assert ray_cluster["metadata"]["namespace"] == "ml"
    assert ray_cluster["spec"]["rayVersion"] == kuberay.RAY_VERSION


def test_the_rendered_ray_version_is_the_one_orchestrate_pins():
    from importlib.metadata import version

    assert version("ray") == kuberay.RAY_VERSION


def test_rays_own_autoscaler_reads_the_files_node_types_back():
    pytest.importorskip("ray")
    from ray.autoscaler._private.kuberay.autoscaling_config import (
        _HEAD_GROUP_NAME,
        _derive_autoscaling_config_from_ray_cr,
    )

    config = rendered(EXAMPLE)
    read = _derive_autoscaling_config_from_ray_cr(manifest())   # also Ray's validate_config
    head = config["head_node_type"]
    for name, node_type in config["available_node_types"].items():
        theirs = read["available_node_types"][_HEAD_GROUP_NAME if name == head else name]
        memory = {"8Gi": 8 << 30, "16Gi": 16 << 30, "32Gi": 32 << 30}[
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
    spec = manifest()["spec"]
    assert spec["authOptions"] == {"mode": "token", "secretName": "orchestrate-kuberay-cpu"}
    assert "token" not in json.dumps(spec).replace('"token"', "").lower().replace(
        "orchestrate-kuberay-cpu", "")


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
