"""A KubeRay cluster used end to end on a real Ray: `up` (waiting for Ray's nodes), `status`,
an unchanged `up`, an in-place update, `run` of an experiment on it, `jobs`, `logs`, `down`.

The Kubernetes API server is faked at the wire (tests/kube_api.py: a loopback HTTP server
speaking the Kubernetes REST API, with a fake KubeRay operator), because none can run on these
machines: no package ships kube-apiserver and no container engine runs. Everything else is
real: the official `kubernetes` client builds every request and the port-forward's websocket,
and the forward to the head pod reaches the ray tier's one embedded Ray (its dashboard), which
runs the job. That Ray plays the head pod: the cluster's token is set to its token before `up`
(`up` keeps a token it finds), and the cluster file expects the one node it has (the head;
workers with min_workers 0). The job is the cheapest that really trains: a one-worker torch
loop of its own (its working_dir uploaded through the forward), no Ray Data.
"""
from __future__ import annotations

import json
import threading
from urllib.parse import urlparse

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.launch.kuberay.manifests import secret_name
from orchestrator.state import State, cluster_key
from tests.kube_api import FakeKube

pytestmark = [pytest.mark.ray]

NAME, NAMESPACE = "kr-ray", "ml"
CLUSTER = """cluster_name: kr-ray
provider: {type: kuberay, namespace: ml, image: rayproject/ray:2.60.0}
head: {cpus: 1, memory: 2Gi}
workers:
  w: {cpus: 1, memory: 2Gi, min_workers: 0, max_workers: 2}
"""
LOOP = """
import ray.train, torch

def train(config):
    model = ray.train.torch.prepare_model(torch.nn.Linear(1, 1))
    for epoch in range(config["epochs"]):
        ray.train.report({"epoch": epoch, "loss": 1.0 / (epoch + 1)})
"""
RAYCLUSTER = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters"


def writes_of_the_raycluster(kube: FakeKube, since: int) -> list[str]:
    return [f"{r.method} {r.path}" for r in kube.requests[since:]
            if r.method in ("POST", "PUT", "PATCH") and r.path.startswith(RAYCLUSTER)]


def head_pods(kube: FakeKube) -> set[str]:
    return {name for name, pod in kube.objects("pods", NAMESPACE).items()
            if pod["metadata"]["labels"].get("ray.io/node-type") == "head"}


def forward_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("Kubernetes port")]


def test_a_kuberay_cluster_end_to_end_on_a_real_ray(local_ray, shared_ray, tmp_path,
                                                    monkeypatch, capsys):
    dashboard = urlparse(local_ray.address)
    cluster_file = tmp_path / "kr.yaml"
    cluster_file.write_text(CLUSTER)
    with FakeKube(namespaces=("default", NAMESPACE), step=0.02, delete_delay=0.02) as kube:
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path / "kubeconfig")))
        kube.route(NAME, 8265, (dashboard.hostname, dashboard.port))
        State.here().secrets.put(cluster_key(NAME), shared_ray.token)   # `up` keeps it

        # up, and the wait for Ray's nodes through the port-forward to the real Ray
        assert main(["up", str(cluster_file), "-y"]) == 0, capsys.readouterr().err
        err = capsys.readouterr().err
        assert "RayCluster kr-ray: ready, 0/0 workers ready" in err
        assert "1/1 nodes alive" in err and f"cluster {NAME} created" in err, err
        assert State.here().secrets.read(cluster_key(NAME)) == shared_ray.token

        assert main(["status", NAME, "--format", "json"]) == 0
        [status] = json.loads(capsys.readouterr().out)
        assert (status["state"], status["provider"]) == ("up", "kuberay")
        assert status["live"]["reachable"] and status["live"]["nodes_alive"] == 1, status

        # the same file again: unchanged, nothing applied
        since = len(kube.requests)
        assert main(["up", str(cluster_file), "-y"]) == 0
        out = capsys.readouterr()
        assert "unchanged" in out.out + out.err, out
        assert writes_of_the_raycluster(kube, since) == []

        # more workers at most: the RayCluster replaced in place, the head pod kept
        heads = head_pods(kube)
        cluster_file.write_text(CLUSTER.replace("max_workers: 2", "max_workers: 3"))
        since = len(kube.requests)
        assert main(["up", str(cluster_file), "-y"]) == 0, capsys.readouterr().err
        err = capsys.readouterr().err
        assert "its pods kept" in err and f"cluster {NAME} updated" in err, err
        assert "  in the RayCluster:\n    ~ spec.workerGroupSpecs[0].maxReplicas\n" in err
        assert [w.split()[0] for w in writes_of_the_raycluster(kube, since)] == ["PUT"]
        assert kube.objects("rayclusters", NAMESPACE)[NAME]["spec"]["workerGroupSpecs"][0][
            "maxReplicas"] == 3
        assert head_pods(kube) == heads

        # an experiment on it: a real job on the real Ray, its working_dir uploaded, all
        # through the port-forward
        (tmp_path / "code").mkdir()
        (tmp_path / "code" / "loop.py").write_text(LOOP)
        experiment = tmp_path / "tiny.yaml"
        experiment.write_text(yaml.safe_dump({
            "name": "kr-tiny", "cluster": str(cluster_file), "trainer": "torch",
            "working_dir": "code", "train_loop": "loop:train",
            "train_loop_config": {"epochs": 2}, "scaling_config": {"num_workers": 1},
            "run_config": {"storage_path": str(tmp_path / "results")}}, sort_keys=False))
        code = main(["run", str(experiment), "--quiet", "--format", "json"])
        out = capsys.readouterr()
        assert code == 0, out.err
        summary = json.loads(out.out)
        assert summary["status"] == "SUCCEEDED" and summary["metrics"]["loss"] == 0.5

        assert main(["jobs", "--cluster", NAME, "--format", "json"]) == 0
        [job] = [r for r in json.loads(capsys.readouterr().out) if r["experiment"] == "kr-tiny"]
        assert job["status"] == "SUCCEEDED"
        assert main(["logs", job["job_id"]]) == 0
        assert "ORCHESTRATE_RESULT" in capsys.readouterr().out

        assert main(["down", NAME, "-y"]) == 0
        err = capsys.readouterr().err
        assert "archiving through the Job API" in err and "logs archived to" in err, err
        assert kube.objects("rayclusters", NAMESPACE) == {}
        assert secret_name(NAME) not in kube.objects("secrets", NAMESPACE)
        assert kube.objects("networkpolicies", NAMESPACE) == {}   # `up` put one, `down` took it
        assert State.here().store.read_cluster(NAME) is None
        # the job's log outlives the cluster, in the archive `down` wrote
        assert main(["logs", job["job_id"], "--cluster", NAME]) == 0
        assert "ORCHESTRATE_RESULT" in capsys.readouterr().out
    assert forward_threads() == []   # every forward's streams closed


def test_apply_of_a_project_with_a_kuberay_cluster(local_ray, shared_ray, tmp_path,
                                                   monkeypatch, capsys):
    """`apply` waits for Ray's nodes through the port-forward (it has no --no-wait), so it is
    tested here; then `plan`'s refresh asks the cluster through the forward: unchanged."""
    dashboard = urlparse(local_ray.address)
    root = tmp_path / "repo"
    (root / "clusters").mkdir(parents=True)
    (root / "orchestrate.yaml").write_text(yaml.safe_dump(
        {"project": "p", "include": ["clusters/*.yaml"]}))
    (root / "clusters" / "kr.yaml").write_text(CLUSTER)
    monkeypatch.chdir(root)
    with FakeKube(namespaces=("default", NAMESPACE), step=0.02, delete_delay=0.02) as kube:
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path / "kubeconfig")))
        kube.route(NAME, 8265, (dashboard.hostname, dashboard.port))
        # the project's tokens are files on this machine: the shared Ray's, kept by `apply`
        State.here().secrets.put(cluster_key(NAME), shared_ray.token)

        assert main(["plan"]) == 0
        assert f"+ cluster/{NAME}: create" in capsys.readouterr().out
        assert main(["apply", "-y"]) == 0, capsys.readouterr().err
        err = capsys.readouterr().err
        assert "1/1 nodes alive" in err, err
        assert NAME in kube.objects("rayclusters", NAMESPACE)

        assert main(["plan", "--format", "json"]) == 0   # refreshed through the forward
        plan = json.loads(capsys.readouterr().out)
        assert plan["refreshed"] and plan["drift"] == [], plan
        assert [(c["address"], c["action"]) for c in plan["changes"]] == \
            [(f"cluster/{NAME}", "no-op")]
    assert forward_threads() == []
