"""`check`, `up`, `status` and `down` of a KubeRay cluster file, through the real `kubernetes`
client, against tests/kube_api.py: a loopback HTTP server speaking the Kubernetes REST API with
a fake KubeRay operator. The API server is faked at the wire because none can run on these
machines (no package ships kube-apiserver, no container engine runs); everything of ours, and the
client, is real. Without a Ray behind the head pod's port-forward these `up`s do not wait for
Ray's nodes (--no-wait); tests/test_kuberay_ray.py routes the forward to a real local Ray."""
from __future__ import annotations

import base64
import itertools
import json
import os
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.errors import ClusterError
from orchestrator.launch.kuberay.backend import KubeRay
from orchestrator.launch.kuberay.manifests import ray_cluster, secret_name
from orchestrator.state import ClusterRecord, State, cluster_key
from orchestrator.util.waiting import poll
from tests.kube_api import FakeKube, close_client, parse_selector, selected

NAMESPACE = "ml"
FILE = """cluster_name: kr
provider: {type: kuberay, namespace: ml, image: rayproject/ray:2.60.0}
head: {cpus: 1, memory: 2Gi}
workers:
  w: {cpus: 2, memory: 4Gi, min_workers: 1, max_workers: 3}
"""


@contextmanager
def serving(tmp_path: Path, monkeypatch, **options) -> Iterator[FakeKube]:
    """A fake with a fast operator, which KUBECONFIG names."""
    with FakeKube(namespaces=("default", NAMESPACE), step=0.02, delete_delay=0.02,
                  **options) as fake:
        monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig(tmp_path / "kubeconfig")))
        yield fake


@pytest.fixture
def kube(tmp_path, monkeypatch):
    with serving(tmp_path, monkeypatch) as fake:
        yield fake


def cluster_file(tmp_path: Path, text: str = FILE) -> Path:
    path = tmp_path / "kr.yaml"
    path.write_text(text)
    return path


def test_check_asks_the_api_server_for_kuberay_and_the_namespace(kube, tmp_path, capsys):
    assert main(["check", str(cluster_file(tmp_path)), "--format", "json"]) == 0
    results = json.loads(capsys.readouterr().out)
    text = json.dumps(results)
    assert "KubeRay's CRDs installed" in text and "namespace ml exists" in text


def test_check_says_kuberay_is_missing_and_where(tmp_path, monkeypatch, capsys):
    with FakeKube(namespaces=("default",), kuberay=False) as fake:
        monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig(tmp_path / "kubeconfig")))
        assert main(["check", str(cluster_file(tmp_path)), "--format", "json"]) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    results = {r["name"]: r for r in json.loads(out.out)["files"][0]["checks"]}
    assert "rayclusters.ray.io, rayjobs.ray.io, rayservices.ray.io not installed" in \
        results["kuberay"]["detail"] and "helm install" in results["kuberay"]["hint"]
    assert (results["kuberay"]["field"], results["kuberay"]["line"]) == ("provider.type", 2)
    assert results["namespace"]["detail"] == "namespace ml does not exist"
    assert results["namespace"]["status"] == "fail"


def test_up_writes_the_token_secret_first_then_the_raycluster_and_down_removes_both(
        kube, tmp_path, capsys):
    path = cluster_file(tmp_path)
    assert main(["up", str(path), "--no-wait", "-y"]) == 0
    out = capsys.readouterr()
    token = State.here().secrets.read(cluster_key("kr"))
    secret = kube.objects("secrets", NAMESPACE)[secret_name("kr")]
    assert base64.b64decode(secret["data"]["auth_token"]).decode() == token
    cluster = kube.objects("rayclusters", NAMESPACE)["kr"]
    assert cluster["spec"] == ray_cluster(State.here().store.read_rendered("kr"))["spec"]
    assert cluster["status"]["state"] == "ready"
    # the Secret was there before the RayCluster asked for it, and the token went nowhere else
    posts = [r.path for r in kube.requests if r.method == "POST"]
    assert posts.index(f"/api/v1/namespaces/{NAMESPACE}/secrets") < \
        posts.index(f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters")
    carrying = [r.path for r in kube.requests if token in r.body
                or base64.b64encode(token.encode()).decode() in r.body]
    assert carrying == [f"/api/v1/namespaces/{NAMESPACE}/secrets"]
    assert token not in out.out + out.err
    assert "RayCluster kr: ready, 1/1 workers ready" in out.err
    record = State.here().store.read_cluster("kr")
    assert record.state == "up" and record.head_ip == cluster["status"]["head"]["podIP"]
    assert record.tunneled
    log = (State.here().store.workspace("kr") / "up.log").read_text()
    assert "created RayCluster ml/kr" in log and token not in log

    assert main(["down", "kr", "-y"]) == 0
    assert kube.objects("rayclusters", NAMESPACE) == {}
    assert kube.objects("secrets", NAMESPACE) == {}
    assert State.here().store.read_cluster("kr") is None


def foreign_raycluster(kube: FakeKube, tmp_path: Path) -> None:
    """A RayCluster `kr` that someone else made (no orchestrate.dev/cluster label)."""
    from kubernetes.client import CustomObjectsApi

    client = kube.client(tmp_path)
    try:
        CustomObjectsApi(client).create_namespaced_custom_object(
            "ray.io", "v1", NAMESPACE, "rayclusters",
            {"apiVersion": "ray.io/v1", "kind": "RayCluster",
             "metadata": {"name": "kr", "namespace": NAMESPACE},
             "spec": {"headGroupSpec": {"template": {"spec": {"containers": [
                 {"name": "ray-head", "image": "x"}]}}}}})
    finally:
        close_client(client)


def test_up_refuses_to_take_over_a_raycluster_it_did_not_make(kube, tmp_path, capsys):
    foreign_raycluster(kube, tmp_path)
    assert main(["up", str(cluster_file(tmp_path)), "--no-wait", "-y"]) == 1
    err = capsys.readouterr().err
    assert "exists that orchestrate did not create" in err and "Traceback" not in err
    assert kube.objects("rayclusters", NAMESPACE)["kr"]["spec"]["headGroupSpec"][
        "template"]["spec"]["containers"][0]["image"] == "x"


def test_down_leaves_a_raycluster_it_did_not_make(kube, tmp_path, capsys):
    """`down` of the cluster whose `up` was refused does not delete the RayCluster there,
    which has no orchestrate.dev/cluster label."""
    foreign_raycluster(kube, tmp_path)
    assert main(["up", str(cluster_file(tmp_path)), "--no-wait", "-y"]) == 1
    capsys.readouterr()
    assert main(["down", "kr", "-y"]) == 1
    err = capsys.readouterr().err
    assert "RayCluster ml/kr exists that orchestrate did not create" in err
    assert "Traceback" not in err
    assert "deletionTimestamp" not in kube.objects("rayclusters", NAMESPACE)["kr"]["metadata"]
    assert [r.path for r in kube.requests if r.method == "DELETE"] == []


def test_a_secret_it_did_not_make_is_neither_overwritten_by_up_nor_deleted_by_down(
        kube, tmp_path, capsys):
    """A Secret named as the cluster's token Secret, without orchestrate's label, keeps its
    token through `up` (refused) and `down`."""
    from kubernetes.client import CoreV1Api

    client = kube.client(tmp_path)
    try:
        CoreV1Api(client).create_namespaced_secret(NAMESPACE, {
            "metadata": {"name": secret_name("kr")}, "stringData": {"auth_token": "theirs"}})
    finally:
        close_client(client)
    assert main(["up", str(cluster_file(tmp_path)), "--no-wait", "-y"]) == 1
    err = capsys.readouterr().err
    assert "Secret ml/orchestrate-kr exists that orchestrate did not create" in err
    assert main(["down", "kr", "-y"]) == 0
    secret = kube.objects("secrets", NAMESPACE)[secret_name("kr")]
    assert base64.b64decode(secret["data"]["auth_token"]) == b"theirs"
    assert "deletionTimestamp" not in secret["metadata"]
    assert {r.method for r in kube.requests if r.path.startswith(
        f"/api/v1/namespaces/{NAMESPACE}/secrets/")} == {"GET"}   # read, never written


def chosen(policy: dict, objects: dict[str, dict]) -> set[str]:
    """The names of the objects (pods) a NetworkPolicy's podSelector selects."""
    rules = parse_selector(",".join(f"{k}={v}" for k, v in
                                    policy["spec"]["podSelector"]["matchLabels"].items()))
    return {name for name, obj in objects.items() if selected(obj, rules, {})}


def test_up_applies_a_network_policy_admitting_only_the_clusters_pods_and_down_deletes_it(
        kube, tmp_path, capsys):
    """The dashboard, Serve and Ray's plaintext gRPC listen on the pod's address: `up` puts
    a NetworkPolicy before the RayCluster that selects every pod KubeRay makes for it and
    admits connections from those pods only (a port-forward enters the pod through its
    kubelet and needs no rule); `down` deletes it once the RayCluster is gone."""
    from kubernetes.client import CoreV1Api

    client = kube.client(tmp_path)
    try:   # another workload in the namespace
        CoreV1Api(client).create_namespaced_pod(NAMESPACE, {
            "metadata": {"name": "notebook", "labels": {"app": "notebook"}},
            "spec": {"containers": [{"name": "n", "image": "x"}]}})
    finally:
        close_client(client)
    assert main(["up", str(cluster_file(tmp_path)), "--no-wait", "-y"]) == 0
    err = capsys.readouterr().err
    policy = kube.objects("networkpolicies", NAMESPACE)["orchestrate-kr"]
    ours = {"ray.io/cluster": "kr"}
    assert policy["spec"] == {"podSelector": {"matchLabels": ours}, "policyTypes": ["Ingress"],
                              "ingress": [{"from": [{"podSelector": {"matchLabels": ours}}]}]}
    assert policy["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "orchestrate",
                                            "orchestrate.dev/cluster": "kr"}
    pods = kube.objects("pods", NAMESPACE)
    assert chosen(policy, pods) == set(pods) - {"notebook"} and len(pods) == 3  # head, worker
    posts = [r.path for r in kube.requests if r.method == "POST"]
    assert posts.index(f"/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}/networkpolicies") < \
        posts.index(f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters")
    assert f"NetworkPolicy {NAMESPACE}/orchestrate-kr" in err
    assert "enforced only where the Kubernetes cluster's network plugin enforces " \
           "NetworkPolicy" in err

    # `up` again replaces it; `down` deletes it
    launched(tmp_path)
    assert "orchestrate-kr" in kube.objects("networkpolicies", NAMESPACE)
    assert main(["down", "kr", "-y"]) == 0
    assert kube.objects("networkpolicies", NAMESPACE) == {}


def test_a_network_policy_it_did_not_make_is_left_and_up_refused(kube, tmp_path, capsys):
    from kubernetes.client import NetworkingV1Api

    client = kube.client(tmp_path)
    try:
        NetworkingV1Api(client).create_namespaced_network_policy(NAMESPACE, {
            "metadata": {"name": "orchestrate-kr"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}})
    finally:
        close_client(client)
    assert main(["up", str(cluster_file(tmp_path)), "--no-wait", "-y"]) == 1
    err = capsys.readouterr().err
    assert "NetworkPolicy ml/orchestrate-kr exists that orchestrate did not create" in err
    assert "Traceback" not in err and kube.objects("rayclusters", NAMESPACE) == {}
    assert kube.objects("networkpolicies", NAMESPACE)["orchestrate-kr"]["spec"][
        "ingress"] == [{}]


def test_a_token_not_ours_in_the_clusters_secret_is_replaced_and_its_pods_restarted(
        kube, tmp_path):
    """Labels do not prove who wrote a Secret: someone rewrites the token in the one `up`
    wrote (labels kept), and pods that start again meanwhile run with it. The next `up`, an
    in-place update that would keep the pods, puts this cluster's token back and restarts
    them all, so that none keeps the other token."""
    from kubernetes.client import CoreV1Api

    launched(tmp_path)
    client = kube.client(tmp_path)
    try:
        CoreV1Api(client).patch_namespaced_secret(secret_name("kr"), NAMESPACE,
                                                  {"stringData": {"auth_token": "theirs"}})
    finally:
        close_client(client)
    before = set(kube.objects("pods", NAMESPACE))
    launched(tmp_path, FILE.replace("max_workers: 3", "max_workers: 5"), restart=False)
    secret = kube.objects("secrets", NAMESPACE)[secret_name("kr")]
    assert base64.b64decode(secret["data"]["auth_token"]).decode() == \
        State.here().secrets.read(cluster_key("kr"))
    running = {name for name, pod in kube.objects("pods", NAMESPACE).items()
               if "deletionTimestamp" not in pod["metadata"]}
    assert running and running.isdisjoint(before)
    log = (State.here().store.workspace("kr") / "up.log").read_text()
    assert "it held a token other than this cluster's" in log and "theirs" not in log


def test_an_unknown_context_is_an_error_naming_it(kube, tmp_path, capsys):
    """A provider.context the kubeconfig lacks: a ClusterError (exit 1) naming it and
    KUBECONFIG, not a bug (exit 3)."""
    path = cluster_file(tmp_path, FILE.replace("ml,", "ml, context: nowhere,"))
    assert main(["up", str(path), "--no-wait", "-y", "--skip-preflight"]) == 1
    err = capsys.readouterr().err
    assert "nowhere" in err and "KUBECONFIG" in err and "Traceback" not in err
    assert kube.objects("rayclusters", NAMESPACE) == {}


def test_down_without_its_kubeconfig_says_so_and_leaves_the_cluster_recorded_up(
        kube, tmp_path, monkeypatch, capsys):
    """A kubeconfig file that is gone: `down` fails with a ClusterError (exit 1) naming
    KUBECONFIG and the file, deletes nothing, and the record is not left `stopping`."""
    assert main(["up", str(cluster_file(tmp_path)), "--no-wait", "-y"]) == 0
    capsys.readouterr()
    missing = tmp_path / "gone" / "kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    assert main(["down", "kr", "-y"]) == 1
    err = capsys.readouterr().err
    assert str(missing) in err and "KUBECONFIG" in err and "Traceback" not in err
    assert State.here().store.read_cluster("kr").state == "up"
    assert "deletionTimestamp" not in kube.objects("rayclusters", NAMESPACE)["kr"]["metadata"]


def test_a_context_in_the_second_kubeconfig_file_is_found(kube, tmp_path, monkeypatch):
    """KUBECONFIG naming several files (os.pathsep between them) is merged, as kubectl
    merges it: the cluster file's context is in the second."""
    import yaml

    first = tmp_path / "first"
    first.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "elsewhere",
        "clusters": [{"name": "elsewhere", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "elsewhere", "user": {"token": "t"}}],
        "contexts": [{"name": "elsewhere",
                      "context": {"cluster": "elsewhere", "user": "elsewhere"}}]}))
    second = kube.kubeconfig(tmp_path / "second", context="team")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second)]))
    path = cluster_file(tmp_path, FILE.replace("ml,", "ml, context: team,"))
    assert main(["up", str(path), "--no-wait", "-y"]) == 0
    assert kube.objects("rayclusters", NAMESPACE)["kr"]["status"]["state"] == "ready"


def rendered(tmp_path: Path, text: str) -> Path:
    from orchestrator.language.cluster import load_cluster
    from orchestrator.render.cluster import render_cluster

    config = render_cluster(load_cluster(cluster_file(tmp_path, text)), token_file="-").config
    return State.here().store.write_rendered("kr", config)


def head_pods(kube: FakeKube) -> set[str]:
    return {name for name, pod in kube.objects("pods", NAMESPACE).items()
            if pod["metadata"]["labels"].get("ray.io/node-type") == "head"}


def launched(tmp_path: Path, text: str = FILE, *, restart: bool = True) -> KubeRay:
    """The backend, once its `up` of the cluster file `text` returned (the token made
    first)."""
    State.here().secrets.ensure(cluster_key("kr"))
    backend = KubeRay(State.here(), lambda _: None)
    backend.launch("kr", "kuberay", rendered(tmp_path, text), restart=restart, timeout=30)
    return backend


def up_record() -> ClusterRecord:
    """The record of the cluster `kr` once it is up, as `forward` reads it."""
    return ClusterRecord(name="kr", provider="kuberay", file="", config_hash="", state="up",
                         head_ip="10.0.0.1", dashboard_host="127.0.0.1", dashboard_port=8265)


def test_an_in_place_update_keeps_the_pods_and_a_restart_makes_new_ones(kube, tmp_path):
    launched(tmp_path)
    first = head_pods(kube)
    launched(tmp_path, FILE.replace("max_workers: 3", "max_workers: 5"), restart=False)
    assert head_pods(kube) == first
    assert kube.objects("rayclusters", NAMESPACE)["kr"]["spec"]["workerGroupSpecs"][0][
        "maxReplicas"] == 5
    launched(tmp_path, FILE.replace("memory: 2Gi", "memory: 3Gi"))
    assert head_pods(kube) and head_pods(kube).isdisjoint(first)


def test_a_replace_the_operator_wrote_before_is_read_again_keeping_what_others_set(
        kube, tmp_path):
    """`up` of a live cluster whose replace meets 409 Conflict (the operator wrote status
    between the read and the replace) reads it again and retries; the replicas the autoscaler
    set and another tool's annotations and finalizers are kept."""
    from kubernetes.client import CustomObjectsApi

    launched(tmp_path)
    client = kube.client(tmp_path)
    try:
        CustomObjectsApi(client).patch_namespaced_custom_object(
            "ray.io", "v1", NAMESPACE, "rayclusters", "kr", [
                {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 2},
                {"op": "add", "path": "/metadata/annotations", "value": {"team/owner": "ml"}},
                {"op": "add", "path": "/metadata/finalizers", "value": ["team/keep"]}],
            _content_type="application/json-patch+json")
    finally:
        close_client(client)
    kube.write_before_replace("rayclusters", "kr", NAMESPACE)
    launched(tmp_path, FILE.replace("max_workers: 3", "max_workers: 5"), restart=False)
    cluster = kube.objects("rayclusters", NAMESPACE)["kr"]
    group = cluster["spec"]["workerGroupSpecs"][0]
    assert (group["minReplicas"], group["replicas"], group["maxReplicas"]) == (1, 2, 5)
    assert cluster["metadata"]["annotations"] == {"team/owner": "ml"}
    assert cluster["metadata"]["finalizers"] == ["team/keep"]
    replaces = [r for r in kube.requests if r.method == "PUT" and r.path.endswith("/kr")]
    assert len(replaces) >= 2   # the first was answered 409


def test_a_restart_waits_for_a_new_head_pod(tmp_path, monkeypatch):
    """After a restart KubeRay still says `ready` and names the old head pod while it
    terminates (it counts going pods as ready): `up` waits until a new head pod is ready."""
    with serving(tmp_path, monkeypatch, pod_grace=1) as kube:
        launched(tmp_path)
        first = head_pods(kube)
        launched(tmp_path, FILE.replace("memory: 2Gi", "memory: 3Gi"))
        head = kube.objects("rayclusters", NAMESPACE)["kr"]["status"]["head"]["podName"]
        assert head not in first
        pod = kube.objects("pods", NAMESPACE)[head]
        assert pod["status"]["phase"] == "Running" and "deletionTimestamp" not in pod["metadata"]


class Says(socketserver.TCPServer):
    """A loopback listener that sends `word` to each connection, then closes it."""

    def __init__(self, word: bytes) -> None:
        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.sendall(word)

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def __exit__(self, *args) -> None:
        self.shutdown()
        super().__exit__(*args)


def test_the_forward_skips_a_head_pod_being_deleted(tmp_path, monkeypatch):
    """While the old head pod terminates beside its replacement (both Running, the old one
    listed first), the port-forward goes to the new one."""
    names = (f"{n:05d}" for n in itertools.count())   # pods named in the order they are made
    monkeypatch.setattr("tests.kube_api.suffix", lambda: next(names))
    with serving(tmp_path, monkeypatch, pod_grace=60) as kube, Says(b"old") as old_head, \
            Says(b"new") as new_head:
        backend = launched(tmp_path)
        (old,) = head_pods(kube)
        kube.route(old, 8265, old_head.server_address)
        from kubernetes.client import CoreV1Api

        client = kube.client(tmp_path)
        try:
            CoreV1Api(client).delete_namespaced_pod(old, NAMESPACE)
        finally:
            close_client(client)

        def replaced() -> str | None:
            pods = kube.objects("pods", NAMESPACE)   # one look: the operator makes pods meanwhile
            return next((name for name, pod in pods.items() if name != old
                         and pod["metadata"]["labels"].get("ray.io/node-type") == "head"
                         and pod["status"]["phase"] == "Running"), None)

        new = poll(replaced, timeout=10, interval=0.02)
        assert new is not None and sorted([old, new]) == [old, new]
        kube.route(new, 8265, new_head.server_address)
        with backend.forward(up_record(), 8265, timeout=10) as port, \
                socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            assert sock.recv(16) == b"new"
        assert "deletionTimestamp" in kube.objects("pods", NAMESPACE)[old]["metadata"]


def test_a_cluster_that_never_gets_ready_times_out_with_what_kuberay_said(kube, tmp_path):
    """Without its token's Secret the head pod cannot start (kubelet: CreateContainerConfigError):
    the wait ends with the operator's reason, not a hang."""
    backend = KubeRay(State.here(), lambda _: None)
    backend._put_secret = lambda *args: None   # as if the Secret had not been written
    State.here().secrets.ensure(cluster_key("kr"))
    with pytest.raises(ClusterError) as caught:
        backend.launch("kr", "kuberay", rendered(tmp_path, FILE), restart=True, timeout=1)
    assert "was not ready within 1 s" in caught.value.message
    assert secret_name("kr") in caught.value.message
    assert "kubectl -n ml describe raycluster kr" in caught.value.hint


def test_the_head_is_reached_through_a_port_forward(kube, tmp_path):
    import socketserver
    import threading
    import urllib.request

    class Hello(socketserver.StreamRequestHandler):
        def handle(self):
            self.rfile.readline()
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello")

    with socketserver.TCPServer(("127.0.0.1", 0), Hello) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        kube.route("kr", 8265, server.server_address)
        backend = launched(tmp_path)
        with backend.forward(up_record(), 8265, timeout=10) as port, \
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
            assert answer.read() == b"hello"
        server.shutdown()


def test_hands_on_commands_say_what_kubectl_does_instead(kube, tmp_path, capsys):
    assert main(["up", str(cluster_file(tmp_path)), "--no-wait", "-y"]) == 0
    capsys.readouterr()
    assert main(["exec", "kr", "hostname"]) == 1
    err = capsys.readouterr().err
    assert "not built for KubeRay clusters yet" in err
    assert "kubectl -n ml exec" in err and "Traceback" not in err


# --- an experiment on a cluster of its own: a RayJob ---

def own_cluster_experiment(tmp_path: Path, **own) -> Path:
    import shutil

    repo = Path(__file__).resolve().parents[2]
    cluster_file(tmp_path)
    (tmp_path / "data").mkdir(exist_ok=True)
    shutil.copy(repo / "experiments" / "data" / "breast_cancer_train.csv", tmp_path / "data")
    store = tmp_path / "store"
    settings = ", ".join(f"{k}: {v}" for k, v in {"package_store": f"file://{store}", **own}.items())
    path = tmp_path / "e.yaml"
    path.write_text(f"""name: tiny
cluster: kr.yaml
own_cluster: {{{settings}}}
trainer: xgboost
datasets: {{train: {{format: csv, path: data/breast_cancer_train.csv}}}}
label_column: target
params: {{objective: "binary:logistic"}}
num_boost_round: 2
scaling_config: {{num_workers: 1}}
run_config: {{storage_path: s3://bucket/results}}
""")
    return path


@pytest.fixture
def quick_jobs(monkeypatch):
    from orchestrator.launch.kuberay import backend

    monkeypatch.setattr(backend, "JOB_POLL_S", 0.02)


def test_run_on_its_own_cluster_stores_the_code_makes_a_rayjob_and_follows_it(
        kube, tmp_path, capsys, quick_jobs):
    import zipfile

    path = own_cluster_experiment(tmp_path)   # its file:// store inside its working_dir
    assert main(["run", str(path)]) == 0
    err = capsys.readouterr().err
    (job,) = kube.objects("rayjobs", NAMESPACE).values()
    name = job["metadata"]["name"]
    assert f"submitted RayJob ml/{name}" in err and "Complete (SUCCEEDED)" in err
    assert "secret" not in json.dumps(kube.submitted(name, NAMESPACE)).lower()
    env = __import__("yaml").safe_load(job["spec"]["runtimeEnvYAML"])
    stored = {p.name for p in (tmp_path / "store").iterdir()}
    assert {Path(env["working_dir"]).name, Path(env["py_modules"][0]).name} == stored
    with zipfile.ZipFile(tmp_path / "store" / Path(env["py_modules"][0]).name) as package:
        assert "orchestrate/orchestrator/workload/__init__.py" in package.namelist()
    with zipfile.ZipFile(tmp_path / "store" / Path(env["working_dir"]).name) as code:
        assert "working_dir/data/breast_cancer_train.csv" in code.namelist()
    # the RayJob's own Secret, owned by it, with the cluster file's token; nowhere else
    token = State.here().secrets.read(cluster_key("kr"))
    secret = kube.objects("secrets", NAMESPACE)[f"orchestrate-{name}"]
    assert base64.b64decode(secret["data"]["auth_token"]).decode() == token
    assert [(o["kind"], o["name"], o["uid"]) for o in secret["metadata"]["ownerReferences"]] == \
        [("RayJob", name, job["metadata"]["uid"])]
    assert job["spec"]["rayClusterSpec"]["authOptions"]["secretName"] == f"orchestrate-{name}"
    assert [r.path for r in kube.requests if token in r.body] == [
        f"/api/v1/namespaces/{NAMESPACE}/secrets"]

    # the same experiment again: its RayJob is found, not made twice, nor its code stored again
    assert main(["run", str(path), "--detach"]) == 0
    err = capsys.readouterr().err
    assert "exists already (it ended SUCCEEDED)" in err and "in the store already" in err
    assert len(kube.objects("rayjobs", NAMESPACE)) == 1
    # --force: another RayJob of the same experiment
    assert main(["run", str(path), "--detach", "--force"]) == 0
    assert "submitted RayJob" in capsys.readouterr().err
    assert len(kube.objects("rayjobs", NAMESPACE)) == 2


def test_a_failed_rayjob_fails_the_run_and_says_where_to_look(kube, tmp_path, capsys,
                                                               quick_jobs):
    kube.job_outcome = lambda name: "FAILED"
    assert main(["run", str(own_cluster_experiment(tmp_path, keep_failed_seconds=600))]) == 1
    err = capsys.readouterr().err
    assert "ended FAILED" in err and "kubectl -n ml logs job/tiny-" in err
    assert "kept 600 s to look into" in err and "Traceback" not in err


def test_a_kuberay_without_authoptions_is_refused_before_and_after_up(tmp_path, monkeypatch,
                                                                      capsys):
    """KubeRay's CRDs before v1.5 have no authOptions, and an API server drops a field its
    schema lacks without a word: `check` says so, and an `up` without preflight deletes the
    RayCluster the server stored without token authentication instead of leaving it running."""
    with FakeKube(namespaces=("default", NAMESPACE), step=0.02, delete_delay=0.02,
                  auth_options=False) as fake:
        monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig(tmp_path / "kubeconfig")))
        path = cluster_file(tmp_path)
        assert main(["check", str(path), "--format", "json"]) == 1
        results = {r["name"]: r for r in json.loads(capsys.readouterr().out)["files"][0]["checks"]}
        assert "no authOptions" in results["kuberay"]["detail"]
        assert main(["up", str(path), "--no-wait", "-y", "--skip-preflight"]) == 1
        err = capsys.readouterr().err
        assert "would have run without token authentication" in err and "Traceback" not in err
        assert fake.objects("rayclusters", NAMESPACE) == {} or all(
            "deletionTimestamp" in c["metadata"]
            for c in fake.objects("rayclusters", NAMESPACE).values())


def test_a_forward_closed_as_its_connections_end_ends_its_streams_cleanly(kube, tmp_path):
    """Each stream's proxy thread (the client's) ends without an error, whichever side closes
    first: a websocket shut under it made it die of a bad file descriptor."""
    import socket
    import socketserver
    import threading

    class Once(socketserver.StreamRequestHandler):   # answers, then closes: the server first
        def handle(self):
            self.wfile.write(self.rfile.readline())

    died: list[BaseException] = []
    hook = threading.excepthook
    threading.excepthook = lambda args: died.append(args.exc_value)
    try:
        with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Once) as server:
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            kube.route("kr", 8265, server.server_address)
            backend = launched(tmp_path)
            for _ in range(5):
                with backend.forward(up_record(), 8265, timeout=10) as port:
                    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
                    for sock in held:
                        sock.sendall(b"ping\n")
                    assert [sock.recv(5) for sock in held] == [b"ping\n"] * 4
                for sock in held:
                    sock.close()
            server.shutdown()
        proxies = [t for t in threading.enumerate() if t.name.startswith("Kubernetes port")]
        assert proxies == [] and died == []
    finally:
        threading.excepthook = hook


def rayjob_name(path: Path, capsys) -> str:
    """The name of the experiment's RayJob, as `render` shows it."""
    assert main(["render", str(path), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)["metadata"]["name"]


def planted(name: str, *, owner: dict | None = None) -> dict:
    """A token Secret named as orchestrate names a RayJob's, with labels as orchestrate's
    (labels prove nothing), holding a token its maker knows."""
    metadata: dict = {"name": f"orchestrate-{name}",
                      "labels": {"app.kubernetes.io/managed-by": "orchestrate",
                                 "orchestrate.dev/cluster": "kr"}}
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob",
                                        "name": owner["metadata"]["name"],
                                        "uid": owner["metadata"]["uid"]}]
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata,
            "stringData": {"auth_token": "theirs"}}


def test_a_rayjob_secret_planted_before_the_run_is_refused_and_nothing_is_made(
        kube, tmp_path, capsys, quick_jobs):
    """Someone who may create Secrets in the namespace makes `orchestrate-<rayjob>` first,
    with a token they know: the RayJob's Ray would run with it. `run` refuses before making
    the RayJob, names the Secret and how to proceed, and leaves it as it is."""
    from kubernetes.client import CoreV1Api

    path = own_cluster_experiment(tmp_path)
    name = rayjob_name(path, capsys)
    client = kube.client(tmp_path)
    try:
        CoreV1Api(client).create_namespaced_secret(NAMESPACE, planted(name))
    finally:
        close_client(client)
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"a Secret ml/orchestrate-{name} exists, before its RayJob" in err, err
    assert f"kubectl -n ml get secret orchestrate-{name} -o yaml" in err
    assert "Traceback" not in err and "theirs" not in err
    assert kube.objects("rayjobs", NAMESPACE) == {}
    assert kube.objects("rayclusters", NAMESPACE) == {}
    secret = kube.objects("secrets", NAMESPACE)[f"orchestrate-{name}"]
    assert base64.b64decode(secret["data"]["auth_token"]) == b"theirs"


def test_a_rayjob_secret_planted_in_the_race_is_refused_and_the_rayjob_deleted(
        kube, tmp_path, capsys, quick_jobs):
    """Someone watching RayJobs makes the new RayJob's Secret between its creation and
    orchestrate's Secret, even owned by it: the token is not the cluster file's, so `run`
    refuses and deletes the RayJob it made (nothing runs with that token)."""
    kube.after_create("rayjobs", lambda job: ("secrets", planted(job["metadata"]["name"],
                                                                owner=job)))
    path = own_cluster_experiment(tmp_path)
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert "holding a token other than the cluster file's" in err, err
    assert "the RayJob made now was deleted" in err and "Traceback" not in err
    jobs = kube.objects("rayjobs", NAMESPACE)
    assert all("deletionTimestamp" in job["metadata"] for job in jobs.values())
    assert "submitted RayJob" not in err


def test_a_rayjobs_network_policy_selects_its_clusters_pods_and_goes_with_it(
        kube, tmp_path, capsys, quick_jobs):
    """A RayJob's cluster gets a NetworkPolicy too, owned by the RayJob: it selects the pods
    KubeRay makes for it (by the RayJob's label in their templates: KubeRay names the
    cluster only once it makes it), admits them, and the head's dashboard port to the
    RayJob's submitter and KubeRay's operator (which asks it for the job's status)."""
    kube.job_outcome = lambda name: "RUNNING"
    assert main(["run", str(own_cluster_experiment(tmp_path)), "--detach"]) == 0
    err = capsys.readouterr().err
    (job,) = kube.objects("rayjobs", NAMESPACE).values()
    name = job["metadata"]["name"]
    policy = kube.objects("networkpolicies", NAMESPACE)[f"orchestrate-{name}"]
    assert [(o["kind"], o["name"], o["uid"]) for o in policy["metadata"]["ownerReferences"]] \
        == [("RayJob", name, job["metadata"]["uid"])]
    ours = {"orchestrate.dev/rayjob": name}
    assert policy["spec"]["podSelector"] == {"matchLabels": ours}
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": ours}}]},
        {"from": [{"podSelector": {"matchLabels": {"ray.io/originated-from-cr-name": name,
                                                   "ray.io/originated-from-crd": "RayJob"}}},
                  {"namespaceSelector": {},
                   "podSelector": {"matchLabels": {
                       "app.kubernetes.io/component": "kuberay-operator"}}}],
         "ports": [{"protocol": "TCP", "port": 8265}]}]
    assert f"NetworkPolicy ml/orchestrate-{name}" in err

    def pods() -> dict[str, dict] | None:
        found = kube.objects("pods", NAMESPACE)
        return found if len(found) == 2 else None   # the head and the minimum's worker

    cluster_pods = poll(pods, timeout=10, interval=0.02)
    assert cluster_pods is not None and chosen(policy, cluster_pods) == set(cluster_pods)
    from kubernetes.client import CustomObjectsApi

    client = kube.client(tmp_path)
    try:
        CustomObjectsApi(client).delete_namespaced_custom_object(
            "ray.io", "v1", NAMESPACE, "rayjobs", name)
    finally:
        close_client(client)
    assert poll(lambda: kube.objects("networkpolicies", NAMESPACE) == {} or None,
                timeout=10, interval=0.02)
