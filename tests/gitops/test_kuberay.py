"""`plan` of a project with a KubeRay cluster, its state written by a real `up` (--no-wait) of
the project's file against tests/kube_api.py, the Kubernetes API faked at the wire (no API
server can run on these machines). A change lists the cluster config's fields and the
RayCluster's, in text, markdown and JSON. `apply`, which always waits for Ray's nodes through
the port-forward, is tested on a real Ray: tests/test_kuberay_ray.py."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from orchestrator.cli import main
from tests.kube_api import FakeKube

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "ml"
CLUSTER = {"cluster_name": "kr",
           "provider": {"type": "kuberay", "namespace": NAMESPACE,
                        "image": "rayproject/ray:2.60.0"},
           "head": {"cpus": 1, "memory": "2Gi"},
           "workers": {"w": {"cpus": 2, "memory": "4Gi", "min_workers": 0, "max_workers": 2}}}


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "repo"
    (root / "clusters").mkdir(parents=True)
    (root / "orchestrate.yaml").write_text(yaml.safe_dump(
        {"project": "p", "include": ["clusters/*.yaml"]}))
    write(root, CLUSTER)
    monkeypatch.chdir(root)
    with FakeKube(namespaces=("default", NAMESPACE), step=0.02, delete_delay=0.02) as fake:
        monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig(tmp_path / "kubeconfig")))
        yield root


def write(root: Path, document: dict) -> Path:
    path = root / "clusters" / "kr.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def plan(capsys, *extra: str) -> str:
    assert main(["plan", "--refresh=false", *extra]) == 0
    return capsys.readouterr().out


def test_plan_of_a_kuberay_cluster_create_update_delete(project, capsys):
    schema = json.loads((REPO / "schemas" / "plan.schema.json").read_text())
    assert "+ cluster/kr: create (not launched yet)  [clusters/kr.yaml]" in plan(capsys)

    # `up` of the project's file (not waiting for Ray's nodes: no Ray behind the fake's head
    # pod) records it in the project's state: unchanged now
    assert main(["up", "clusters/kr.yaml", "--no-wait", "-y"]) == 0
    capsys.readouterr()
    assert "No changes. 1 unchanged." in plan(capsys)

    # more workers at most: an update, with the RayCluster's fields beside the config's
    write(project, {**CLUSTER, "workers": {"w": {**CLUSTER["workers"]["w"], "max_workers": 3}}})
    text = plan(capsys)
    assert "~ cluster/kr: update" in text
    assert "      ~ available_node_types.w.max_workers\n" \
           "      ~ max_workers\n" \
           "      in the RayCluster:\n" \
           "        ~ spec.workerGroupSpecs[0].maxReplicas\n" in text, text
    as_json = json.loads(plan(capsys, "--format", "json"))
    jsonschema.validate(as_json, schema)
    [change] = as_json["changes"]
    assert (change["action"], change["fields"], change["resource_fields"]) == (
        "update", ["~ available_node_types.w.max_workers", "~ max_workers"],
        ["~ spec.workerGroupSpecs[0].maxReplicas"])
    markdown = plan(capsys, "--format", "markdown")
    assert "# cluster/kr: in the RayCluster\n! spec.workerGroupSpecs[0].maxReplicas\n" in markdown

    # a saved plan keeps them (`show` reads it back)
    saved = project.parent / "plan.json"
    plan(capsys, "--out", str(saved))
    assert main(["show", str(saved), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"][0]["resource_fields"] == \
        ["~ spec.workerGroupSpecs[0].maxReplicas"]

    # a new worker group: the RayCluster gains an entry
    write(project, {**CLUSTER, "workers": {**CLUSTER["workers"], "x": CLUSTER["workers"]["w"]}})
    [change] = json.loads(plan(capsys, "--format", "json"))["changes"]
    assert "+ spec.workerGroupSpecs[1].groupName" in change["resource_fields"]

    # the update carried out by `up` (the project's state checked out for a KubeRay cluster)
    write(project, {**CLUSTER, "workers": {"w": {**CLUSTER["workers"]["w"], "max_workers": 3}}})
    assert main(["up", "clusters/kr.yaml", "--no-wait", "-y"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert "No changes. 1 unchanged." in plan(capsys)

    # the file leaves the project: a delete, saying what tearing it down does
    (project / "clusters" / "kr.yaml").unlink()
    (project / "clusters" / "other.yaml").write_text(yaml.safe_dump(
        {**CLUSTER, "cluster_name": "other"}))
    text = plan(capsys)
    assert "- cluster/kr: delete (the file is no longer in the project)" in text, text
    as_json = json.loads(plan(capsys, "--format", "json"))
    jsonschema.validate(as_json, schema)
    assert [(c["address"], c["action"]) for c in as_json["changes"]] == \
        [("cluster/kr", "delete"), ("cluster/other", "create")]
    assert "delete the RayCluster 'ml'/'kr', its token's Secret 'ml'/'orchestrate-kr' and its " \
           "NetworkPolicy through the Kubernetes API, the kubeconfig's current context" in text
    assert "ray down" not in text and "ssh" not in text


def test_resource_fields_only_for_kuberay_and_never_from_a_config_that_does_not_render():
    from orchestrator.cluster.plan import resource_diff

    assert resource_diff({"max_workers": 1}, {"max_workers": 2}, "local") == []
    damaged = {"cluster_name": "kr", "provider": "not a mapping"}
    assert resource_diff(damaged, damaged, "kuberay") == []
