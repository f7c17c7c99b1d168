"""The fake Kubernetes API server (tests/kube_api.py) through the real `kubernetes` client: if
the client reads what the fake answers as it reads a real API server's answers, the KubeRay
backend's tests against the fake mean something. Fast tier: no Ray, no SSH."""
from __future__ import annotations

import base64
import json
import os
import socket
import socketserver
import stat
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.kube_api import FakeKube, close_client, json_patch, merge_patch, parse_selector, selected

NS = "default"
RAY = ("ray.io", "v1", NS)


def _cluster(name: str = "c1", workers: int = 2, **spec) -> dict:
    head = {"name": "ray-head", "image": "rayproject/ray:2.49.0",
            "ports": [{"name": "gcs-server", "containerPort": 6379},
                      {"name": "dashboard", "containerPort": 8265},
                      {"name": "client", "containerPort": 10001}]}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "labels": {"app": "demo", "team": "ml"}},
            "spec": {"headGroupSpec": {"rayStartParams": {},
                                       "template": {"spec": {"containers": [head]}}},
                     "workerGroupSpecs": [{"groupName": "cpu", "replicas": workers,
                                           "minReplicas": 0, "maxReplicas": 4,
                                           "rayStartParams": {},
                                           "template": {"spec": {"containers": [
                                               {"name": "ray-worker", "image": "ray"}]}}}],
                     **spec}}


def _no_new_threads(before: set[threading.Thread]) -> None:
    deadline = time.monotonic() + 3
    while (left := [t for t in threading.enumerate() if t not in before and t.is_alive()]) \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not left, f"threads left behind: {left}"


def _sockets() -> set[str]:
    """This process's open sockets (by inode)."""
    return {target for fd in os.listdir("/proc/self/fd")
            if (target := _link(fd)).startswith("socket:")}


@pytest.fixture
def kube():
    """A fake with a fast operator; after the test, its thread, its listener and every socket
    of the test (the client's too: the `api` fixture closes it first) are gone."""
    before, sockets = set(threading.enumerate()), _sockets()
    with FakeKube(step=0.02, delete_delay=0.02) as fake:
        yield fake
    _no_new_threads(before)
    left = _sockets() - sockets
    assert not left, f"sockets left open: {_described(left)}"
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", fake.port), timeout=1):
        pass


def _described(inodes: set[str]) -> list[str]:
    import gc

    fds = {fd for fd in os.listdir("/proc/self/fd") if _link(fd) in inodes}
    return [repr(o) for o in gc.get_objects()
            if isinstance(o, socket.socket) and str(o.fileno()) in fds]


def _link(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@pytest.fixture
def api(kube, tmp_path):
    """The real client, built from the kubeconfig file the fake wrote."""
    client = kube.client(tmp_path)
    yield client
    close_client(client)


def _custom(api):
    from kubernetes import client

    return client.CustomObjectsApi(api)


def _core(api):
    from kubernetes import client

    return client.CoreV1Api(api)


def _wait(api, plural: str, name: str, done, timeout: float = 5) -> dict:
    """Watch (as a launcher would) until done(object) holds; the object then."""
    from kubernetes import watch

    stream = watch.Watch()
    for event in stream.stream(_custom(api).list_namespaced_custom_object, *RAY, plural,
                               field_selector=f"metadata.name={name}", timeout_seconds=timeout):
        if done(event["object"]):
            stream.stop()
            return event["object"]
    raise AssertionError(f"{plural}/{name} did not get there in {timeout} s")


def _eventually(check, timeout: float = 2) -> None:
    """Poll check() until it holds: the fake's timers are scaled, not exact."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "never came"
        time.sleep(0.01)


def _api_error(call, *args, **kwargs):
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as caught:
        call(*args, **kwargs)
    return caught.value, json.loads(caught.value.body)


def _state(obj: dict) -> str | None:
    return (obj.get("status") or {}).get("state")


def test_kubeconfig_is_private_and_every_request_needs_the_token(kube, api, tmp_path):
    path = kube.kubeconfig(tmp_path / "kubeconfig")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert _core(api).read_namespace(NS).status.phase == "Active"
    # no token: 401 with a Status body
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.HTTPError) as caught:
        opener.open(f"{kube.url}/api/v1/namespaces/default/secrets", timeout=5)
    body = json.loads(caught.value.read())
    assert (caught.value.code, body["kind"], body["reason"], body["code"]) == (
        401, "Status", "Unauthorized", 401)
    # a wrong token, through the real client
    import kubernetes

    wrong = kubernetes.config.new_client_from_config(
        config_file=str(kube.kubeconfig(tmp_path / "wrong", token="nope")), context="fake")
    try:
        error, _ = _api_error(_core(wrong).list_namespaced_secret, NS)
        assert error.status == 401
    finally:
        close_client(wrong)
    # what the fake keeps of each request leaves the token out
    assert kube.requests and all("authorization" not in {h.lower() for h in r.headers}
                                 for r in kube.requests)


def test_namespaces_version_and_missing_namespace(kube, api):
    from kubernetes import client

    assert [n.metadata.name for n in _core(api).list_namespace().items] == ["default"]
    error, body = _api_error(_core(api).read_namespace, "elsewhere")
    assert (error.status, body["reason"]) == (404, "NotFound")
    error, body = _api_error(_custom(api).create_namespaced_custom_object, "ray.io", "v1",
                             "elsewhere", "rayclusters", _cluster())
    assert (error.status, body["message"]) == (404, 'namespaces "elsewhere" not found')
    assert client.VersionApi(api).get_code().major == "1"


def test_raycluster_create_get_list_patch_replace_delete(kube, api):
    custom = _custom(api)
    created = custom.create_namespaced_custom_object(*RAY, "rayclusters", _cluster())
    meta = created["metadata"]
    assert (created["kind"], created["apiVersion"], meta["namespace"], meta["generation"]) == (
        "RayCluster", "ray.io/v1", NS, 1)
    assert meta["uid"] and meta["resourceVersion"] and meta["creationTimestamp"].endswith("Z")
    assert custom.get_namespaced_custom_object(*RAY, "rayclusters", "c1")["metadata"]["uid"] \
        == meta["uid"]
    # a label selector of the form a=b,c=d
    listed = custom.list_namespaced_custom_object(*RAY, "rayclusters",
                                                  label_selector="app=demo,team=ml")
    assert listed["kind"] == "RayClusterList" and [i["metadata"]["name"]
                                                   for i in listed["items"]] == ["c1"]
    assert custom.list_namespaced_custom_object(*RAY, "rayclusters",
                                                label_selector="app=demo,team=web")["items"] == []
    # again: 409 AlreadyExists
    error, body = _api_error(custom.create_namespaced_custom_object, *RAY, "rayclusters",
                             _cluster())
    assert (error.status, body["reason"], body["kind"], body["status"]) == (
        409, "AlreadyExists", "Status", "Failure")
    # a dict body goes as a merge patch (the only type the client sends for custom objects)
    patched = custom.patch_namespaced_custom_object(
        *RAY, "rayclusters", "c1", {"metadata": {"labels": {"team": None}},
                                    "spec": {"rayVersion": "2.49.0"}})
    assert patched["metadata"]["labels"] == {"app": "demo"}
    assert patched["spec"]["rayVersion"] == "2.49.0" and patched["metadata"]["generation"] == 2
    assert kube.requests[-1].headers["Content-Type"] == "application/merge-patch+json"
    # a JSON patch needs its content type said
    patched = custom.patch_namespaced_custom_object(
        *RAY, "rayclusters", "c1", [{"op": "replace", "path": "/spec/rayVersion",
                                     "value": "2.50.0"}],
        _content_type="application/json-patch+json")
    assert patched["spec"]["rayVersion"] == "2.50.0"
    # without it, the list goes as a merge patch, which must be an object
    error, body = _api_error(custom.patch_namespaced_custom_object, *RAY, "rayclusters", "c1",
                             [{"op": "remove", "path": "/spec/rayVersion"}])
    assert (error.status, body["reason"]) == (400, "BadRequest")
    assert kube.requests[-1].headers["Content-Type"] == "application/merge-patch+json"
    # a custom resource takes no strategic merge patch
    error, _ = _api_error(custom.patch_namespaced_custom_object, *RAY, "rayclusters", "c1",
                          {"spec": {}}, _content_type="application/strategic-merge-patch+json")
    assert error.status == 415
    # replace: a stale resourceVersion is a conflict, none at all is invalid for a custom object
    stale = dict(created, spec=dict(created["spec"], rayVersion="1"))
    error, body = _api_error(custom.replace_namespaced_custom_object, *RAY, "rayclusters", "c1",
                             stale)
    assert (error.status, body["reason"]) == (409, "Conflict")
    unconditional = dict(stale, metadata={"name": "c1"})
    error, body = _api_error(custom.replace_namespaced_custom_object, *RAY, "rayclusters", "c1",
                             unconditional)
    assert (error.status, body["reason"]) == (422, "Invalid")
    # the operator writes status meanwhile: a replace may conflict, and is tried again
    from kubernetes.client.exceptions import ApiException

    for _ in range(20):
        current = custom.get_namespaced_custom_object(*RAY, "rayclusters", "c1")
        current["spec"]["rayVersion"] = "2.51.0"
        current["status"] = {"state": "made-up"}   # the main resource does not write status
        try:
            replaced = custom.replace_namespaced_custom_object(*RAY, "rayclusters", "c1",
                                                               current)
            break
        except ApiException as e:
            assert e.status == 409
    assert replaced["spec"]["rayVersion"] == "2.51.0" and _state(replaced) != "made-up"
    # delete answers a Status; the object has a deletionTimestamp, then goes
    deleted = custom.delete_namespaced_custom_object(*RAY, "rayclusters", "c1")
    assert (deleted["kind"], deleted["status"], deleted["details"]["name"]) == (
        "Status", "Success", "c1")
    _eventually(lambda: kube.objects("rayclusters") == {})
    error, body = _api_error(custom.get_namespaced_custom_object, *RAY, "rayclusters", "c1")
    assert (error.status, body["reason"], body["details"]["kind"]) == (404, "NotFound",
                                                                        "rayclusters")
    _eventually(lambda: kube.objects("pods") == {} and kube.objects("services") == {})


def test_operator_steps_a_raycluster_to_ready_and_follows_its_replicas(kube, api):
    custom = _custom(api)
    custom.create_namespaced_custom_object(*RAY, "rayclusters", _cluster(workers=2))
    ready = _wait(api, "rayclusters", "c1", lambda o: _state(o) == "ready")
    status = ready["status"]
    head = status["head"]
    assert head["podName"].startswith("c1-head-") and head["serviceName"] == "c1-head-svc"
    assert head["podIP"] and head["serviceIP"]
    # only the ports the head container declares
    assert status["endpoints"] == {"gcs-server": "6379", "dashboard": "8265", "client": "10001"}
    assert (status["desiredWorkerReplicas"], status["readyWorkerReplicas"],
            status["minWorkerReplicas"], status["maxWorkerReplicas"]) == (2, 2, 0, 4)
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "HeadPodReady": "True", "RayClusterProvisioned": "True"}
    pods = _core(api).list_namespaced_pod(NS, label_selector="ray.io/cluster=c1").items
    kinds = sorted((p.metadata.labels["ray.io/node-type"], p.metadata.labels["ray.io/group"],
                    p.status.phase) for p in pods)
    assert kinds == [("head", "headgroup", "Running"), ("worker", "cpu", "Running"),
                     ("worker", "cpu", "Running")]
    # a spec change: the worker pods follow the replicas
    custom.patch_namespaced_custom_object(*RAY, "rayclusters", "c1", {"spec": {
        "workerGroupSpecs": [dict(_cluster()["spec"]["workerGroupSpecs"][0], replicas=1)]}})
    scaled = _wait(api, "rayclusters", "c1", lambda o: o["status"]["observedGeneration"] == 2
                   and o["status"]["desiredWorkerReplicas"] == 1)
    assert _state(scaled) == "ready"
    _eventually(lambda: len(_core(api).list_namespaced_pod(
        NS, label_selector="ray.io/node-type=worker").items) == 1)


def test_a_missing_auth_secret_keeps_the_cluster_from_ready(kube, api):
    """KubeRay mounts the token Secret into the Ray pods: without it, the head pod never
    starts and the cluster never becomes ready; once the Secret exists, it does."""
    custom = _custom(api)
    body = _cluster(workers=0, authOptions={"mode": "token", "secretName": "c1-token"})
    custom.create_namespaced_custom_object(*RAY, "rayclusters", body)
    waiting = _wait(api, "rayclusters", "c1", lambda o: any(
        c["type"] == "HeadPodReady" and c["reason"] == "CreateContainerConfigError"
        for c in (o.get("status") or {}).get("conditions") or []))
    assert _state(waiting) is None
    assert 'secret "c1-token" not found' in waiting["status"]["reason"]
    time.sleep(0.1)
    assert _state(custom.get_namespaced_custom_object(*RAY, "rayclusters", "c1")) is None
    _core(api).create_namespaced_secret(NS, {"metadata": {"name": "c1-token"},
                                             "stringData": {"auth_token": "t"}})
    _wait(api, "rayclusters", "c1", lambda o: _state(o) == "ready")


def test_secret_string_data_becomes_base64_data(kube, api):
    core = _core(api)
    token = "s3cret-token"
    created = core.create_namespaced_secret(NS, {"metadata": {"name": "tok", "labels": {"a": "b"}},
                                                 "stringData": {"auth_token": token}})
    assert created.data == {"auth_token": base64.b64encode(token.encode()).decode()}
    assert created.string_data is None and created.type == "Opaque"
    stored = kube.objects("secrets")["tok"]
    assert "stringData" not in stored and stored["data"] == created.data
    # a dict patch to a core object goes as a strategic merge patch
    core.patch_namespaced_secret("tok", NS, {"stringData": {"other": "x"}})
    assert kube.requests[-1].headers["Content-Type"] == "application/strategic-merge-patch+json"
    read = core.read_namespaced_secret("tok", NS)
    assert sorted(read.data) == ["auth_token", "other"]
    assert [s.metadata.name for s in core.list_namespaced_secret(NS, label_selector="a=b").items] \
        == ["tok"]
    error, body = _api_error(core.read_namespaced_secret, "absent", NS)
    assert (error.status, body["message"]) == (404, 'secrets "absent" not found')
    # the token travels in the Secret's body and in no other request
    assert [r.path for r in kube.requests if token in r.body] == ["/api/v1/namespaces/default/secrets"]
    # a Secret without finalizers is gone as soon as its delete is answered, as on a real
    # API server (a test reading the store right after `down` relies on it)
    core.delete_namespaced_secret("tok", NS)
    assert "tok" not in kube.objects("secrets")


def _job(name: str = "j1", **spec) -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name},
            "spec": {"entrypoint": "python -c 'print(1)'",
                     "runtimeEnvYAML": "pip: [requests]\n", "submissionMode": "HTTPMode",
                     "entrypointNumCpus": 1, "rayClusterSpec": _cluster(workers=1)["spec"],
                     **spec}}


def test_rayjob_runs_to_complete_and_its_cluster_goes_after_the_ttl(kube, api):
    from kubernetes import watch

    custom = _custom(api)
    custom.create_namespaced_custom_object(*RAY, "rayjobs", _job(
        shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=60))
    seen = []
    stream = watch.Watch()
    for event in stream.stream(custom.list_namespaced_custom_object, *RAY, "rayjobs",
                               timeout_seconds=5):
        status = event["object"].get("status") or {}
        step = (status.get("jobDeploymentStatus", ""), status.get("jobStatus", ""))
        if not seen or seen[-1] != step:
            seen.append(step)
        if step[0] == "Complete":
            stream.stop()
    assert seen == [("", ""), ("Initializing", ""), ("Running", "PENDING"),
                    ("Running", "RUNNING"), ("Complete", "SUCCEEDED")]
    job = custom.get_namespaced_custom_object(*RAY, "rayjobs", "j1")
    cluster = job["status"]["rayClusterName"]
    assert cluster.startswith("j1-") and job["status"]["jobId"].startswith("j1-")
    assert job["status"]["dashboardURL"] == f"{cluster}-head-svc.default.svc.cluster.local:8265"
    submitted = kube.submitted("j1")
    assert (submitted["entrypoint"], submitted["runtimeEnvYAML"], submitted["submissionMode"],
            submitted["entrypointNumCpus"]) == ("python -c 'print(1)'", "pip: [requests]\n",
                                                "HTTPMode", 1)
    # 60 s, scaled
    _eventually(lambda: kube.objects("rayclusters") == {} and kube.objects("pods") == {})
    assert "j1" in kube.objects("rayjobs")


def test_a_failed_rayjob_follows_its_deletion_rules(kube, api):
    kube.fail_job("j2")
    custom = _custom(api)
    rules = [{"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED"}},
             {"policy": "DeleteWorkers", "condition": {"jobStatus": "FAILED", "ttlSeconds": 0}},
             {"policy": "DeleteSelf", "condition": {"jobStatus": "FAILED", "ttlSeconds": 300}}]
    custom.create_namespaced_custom_object(*RAY, "rayjobs", _job(
        "j2", jobId="my-id", deletionStrategy={"deletionRules": rules}))
    failed = _wait(api, "rayjobs", "j2", lambda o: (o.get("status") or {}).get(
        "jobDeploymentStatus") == "Failed")
    assert failed["status"]["jobStatus"] == "FAILED" and failed["status"]["jobId"] == "my-id"
    cluster = failed["status"]["rayClusterName"]
    # DeleteWorkers at once: the cluster stays, its workers go
    _eventually(lambda: not kube.objects("pods", NS).keys() - {
        kube.objects("rayclusters")[cluster]["status"]["head"]["podName"]})
    kept = kube.objects("rayclusters")[cluster]
    assert kept["spec"]["workerGroupSpecs"][0]["suspend"] is True
    assert "j2" in kube.objects("rayjobs")
    # DeleteSelf after 300 s (scaled): the job goes, and its cluster with it
    _eventually(lambda: kube.objects("rayjobs") == {} and kube.objects("rayclusters") == {})
    assert kube.submitted("j2")["jobId"] == "my-id"


def test_a_held_rayjob_runs_until_told(kube, api):
    kube.set_job_outcome("j3", "RUNNING")
    _custom(api).create_namespaced_custom_object(*RAY, "rayjobs", _job("j3"))
    _wait(api, "rayjobs", "j3", lambda o: (o.get("status") or {}).get("jobStatus") == "RUNNING")
    time.sleep(0.1)
    assert kube.objects("rayjobs")["j3"]["status"]["jobStatus"] == "RUNNING"
    kube.set_job_outcome("j3", "SUCCEEDED")
    _wait(api, "rayjobs", "j3", lambda o: o["status"]["jobStatus"] == "SUCCEEDED")


def test_rayservice_runs_its_applications(kube, api):
    serve = "applications:\n- name: fruit\n  import_path: fruit:app\n- name: math\n" \
            "  import_path: math:app\n"
    _custom(api).create_namespaced_custom_object(*RAY, "rayservices", {
        "apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "s1"},
        "spec": {"serveConfigV2": serve, "rayClusterConfig": _cluster(workers=1)["spec"]}})
    running = _wait(api, "rayservices", "s1",
                    lambda o: (o.get("status") or {}).get("serviceStatus") == "Running")
    active = running["status"]["activeServiceStatus"]
    assert active["rayClusterName"].startswith("s1-raycluster-")
    assert {app: s["status"] for app, s in active["applicationStatuses"].items()} == {
        "fruit": "RUNNING", "math": "RUNNING"}
    assert {c["type"]: c["status"] for c in running["status"]["conditions"]}["Ready"] == "True"
    assert _state(kube.objects("rayclusters")[active["rayClusterName"]]) == "ready"


def test_without_kuberay_the_crds_and_the_api_are_absent(tmp_path):
    from kubernetes import client

    before = set(threading.enumerate())
    for installed in (True, False):
        with FakeKube(kuberay=installed, step=0.02) as fake:
            api = fake.client(tmp_path)
            try:
                crds = client.ApiextensionsV1Api(api)
                if installed:
                    crd = crds.read_custom_resource_definition("rayjobs.ray.io")
                    assert crd.spec.names.kind == "RayJob"
                    continue
                error, body = _api_error(crds.read_custom_resource_definition, "rayjobs.ray.io")
                assert (error.status, body["reason"]) == (404, "NotFound")
                error, _ = _api_error(_custom(api).create_namespaced_custom_object, *RAY,
                                      "rayclusters", _cluster())
                assert error.status == 404
            finally:
                close_client(api)
    _no_new_threads(before)


def test_watch_from_a_resource_version_sends_only_what_came_after(kube, api):
    from kubernetes import watch

    custom = _custom(api)
    custom.create_namespaced_custom_object(*RAY, "rayclusters", _cluster("old", suspend=True))
    version = custom.list_namespaced_custom_object(*RAY, "rayclusters")["metadata"][
        "resourceVersion"]
    custom.create_namespaced_custom_object(*RAY, "rayclusters", _cluster("new", suspend=True))
    stream = watch.Watch()
    events = [(e["type"], e["object"]["metadata"]["name"]) for e in stream.stream(
        custom.list_namespaced_custom_object, *RAY, "rayclusters", resource_version=version,
        timeout_seconds=0.3)]
    # the old cluster comes only as the operator steps it (MODIFIED), never as ADDED
    assert ("ADDED", "new") in events and ("ADDED", "old") not in events


def _end(forward) -> None:
    """The client's port-forward thread returns without closing its websocket when the server
    closed it first (here: the HTTP/1.0 server closed the connection, so the fake closed the
    websocket); its socket would stay open until garbage collection. Closed here, once the
    thread is done."""
    deadline = time.monotonic() + 3
    while any(t.name.startswith("Kubernetes port forward proxy") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the port-forward thread did not end"
        time.sleep(0.01)
    forward.websocket.shutdown()


class _Echo(socketserver.ThreadingTCPServer):
    daemon_threads = True
    block_on_close = True

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            while data := self.request.recv(65536):
                self.request.sendall(data)


def test_port_forward_reaches_a_loopback_target(kube, api):
    from kubernetes.stream import portforward

    custom = _custom(api)
    custom.create_namespaced_custom_object(*RAY, "rayclusters", _cluster(workers=0))
    head = _wait(api, "rayclusters", "c1", lambda o: _state(o) == "ready")["status"]["head"]
    echo = _Echo(("127.0.0.1", 0), _Echo.Handler)
    server = threading.Thread(target=echo.serve_forever, daemon=True)
    server.start()
    try:
        kube.route("c1", 8265, echo.server_address)
        forward = portforward(_core(api).connect_get_namespaced_pod_portforward,
                              head["podName"], NS, ports="8265,10001")
        sock = forward.socket(8265)
        sock.settimeout(5)
        payload = b"hello through the websocket\n" * 1000
        sock.sendall(payload)
        received = b""
        while len(received) < len(payload):
            received += sock.recv(65536)
        assert received == payload
        # the other port has no route: its error channel says so
        deadline = time.monotonic() + 2
        while forward.error(10001) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "error forwarding port 10001" in (forward.error(10001) or "")
        sock.close()
        forward.socket(10001).close()
    finally:
        echo.shutdown()
        echo.server_close()
        server.join(2)
    assert kube.requests[-1].path.endswith("/portforward?ports=8265%2C10001")


def test_merge_patch_and_json_patch_follow_their_rfcs():
    assert merge_patch({"a": "b", "c": {"d": "e", "f": "g"}}, {"a": "z", "c": {"f": None}}) == {
        "a": "z", "c": {"d": "e"}}
    assert merge_patch({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}
    assert merge_patch({"a": "b"}, ["c"]) == ["c"]
    doc = {"a": {"b": [1, 2]}}
    assert json_patch(doc, [{"op": "add", "path": "/a/b/-", "value": 3},
                            {"op": "replace", "path": "/a/b/0", "value": 0},
                            {"op": "copy", "from": "/a/b", "path": "/c"},
                            {"op": "remove", "path": "/a/b/1"},
                            {"op": "test", "path": "/c", "value": [0, 2, 3]}]) == {
        "a": {"b": [0, 3]}, "c": [0, 2, 3]}
    assert doc == {"a": {"b": [1, 2]}}
    with pytest.raises(ValueError):
        json_patch(doc, [{"op": "test", "path": "/a/b", "value": []}])
    with pytest.raises(ValueError):
        json_patch(doc, [{"op": "remove", "path": "/nope"}])


def test_label_selectors():
    obj = {"metadata": {"labels": {"a": "b", "env": "prod"}}}
    for text, expected in [("a=b", True), ("a==b,env=prod", True), ("a!=b", False),
                           ("a", True), ("!a", False), ("env in (dev, prod)", True),
                           ("env notin (prod)", False), ("missing", False), ("", True)]:
        assert selected(obj, parse_selector(text), {}) is expected, text


def test_status_subresource_writes_status_only(kube, api):
    custom = _custom(api)
    custom.create_namespaced_custom_object(*RAY, "rayclusters", _cluster(suspend=True))
    patched = custom.patch_namespaced_custom_object_status(
        *RAY, "rayclusters", "c1", {"status": {"reason": "by hand"}, "spec": {"rayVersion": "x"}})
    assert patched["status"]["reason"] == "by hand" and "rayVersion" not in patched["spec"]
    assert patched["metadata"]["generation"] == 1
    assert custom.get_namespaced_custom_object_status(*RAY, "rayclusters", "c1")["status"][
        "reason"] == "by hand"


def test_pods_watch_as_models_and_a_deleted_head_pod_comes_back(kube, api):
    """The client turns pod events into V1Pod models (the fake's pods must carry every field
    the models require); KubeRay replaces a head pod that goes."""
    from kubernetes import watch

    _custom(api).create_namespaced_custom_object(*RAY, "rayclusters", _cluster(workers=0))
    stream = watch.Watch()
    for event in stream.stream(_core(api).list_namespaced_pod, NS,
                               label_selector="ray.io/node-type=head", timeout_seconds=5):
        if event["object"].status.phase == "Running":
            stream.stop()
            first = event["object"].metadata.name
            break
    else:
        raise AssertionError("no head pod ran")
    deleted = _core(api).delete_namespaced_pod(first, NS)
    assert deleted.metadata.name == first and deleted.metadata.deletion_timestamp is not None
    _eventually(lambda: (kube.objects("rayclusters")["c1"]["status"].get("head") or {}).get(
        "podName") not in (None, first))


def test_discovery_and_crd_list(kube, api):
    from kubernetes import client

    found = api.call_api("/apis/ray.io/v1", "GET", auth_settings=["BearerToken"],
                         response_types_map={200: "object"}, _return_http_data_only=True)
    assert {r["name"] for r in found["resources"]} >= {"rayclusters", "rayjobs", "rayservices",
                                                       "rayjobs/status"}
    names = [c.metadata.name for c in
             client.ApiextensionsV1Api(api).list_custom_resource_definition().items]
    assert names == ["rayclusters.ray.io", "rayjobs.ray.io", "rayservices.ray.io"]


def _policy(name: str = "p1", **labels: str) -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "labels": labels},
            "spec": {"podSelector": {"matchLabels": {"ray.io/cluster": "c1"}},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {
                         "ray.io/cluster": "c1"}}}]}]}}


def test_networkpolicy_create_get_list_replace_delete_and_discovery(kube, api):
    """NetworkPolicies through the client's NetworkingV1Api, as a built-in resource: an
    unconditional replace is taken (a custom resource's is refused), a stale one is 409, a
    delete is at once, and an owner's deletion takes them."""
    from kubernetes import client

    net = client.NetworkingV1Api(api)
    created = net.create_namespaced_network_policy(NS, _policy(team="ml"))
    assert created.metadata.generation == 1 and created.metadata.uid
    error, body = _api_error(net.create_namespaced_network_policy, NS, _policy())
    assert (error.status, body["reason"]) == (409, "AlreadyExists")
    read = net.read_namespaced_network_policy("p1", NS)
    assert read.spec.pod_selector.match_labels == {"ray.io/cluster": "c1"}
    assert read.spec.policy_types == ["Ingress"]
    assert [p.metadata.name for p in
            net.list_namespaced_network_policy(NS, label_selector="team=ml").items] == ["p1"]
    changed = _policy(team="ml")
    changed["spec"]["ingress"] = []
    replaced = net.replace_namespaced_network_policy("p1", NS, changed)   # no resourceVersion
    assert not replaced.spec.ingress and replaced.metadata.generation == 2
    stale = {**changed, "metadata": {**changed["metadata"],
                                     "resourceVersion": created.metadata.resource_version}}
    error, _ = _api_error(net.replace_namespaced_network_policy, "p1", NS, stale)
    assert error.status == 409
    net.delete_namespaced_network_policy("p1", NS)
    assert kube.objects("networkpolicies") == {}
    error, body = _api_error(net.read_namespaced_network_policy, "p1", NS)
    assert (error.status, body["message"]) == (404, 'networkpolicies.networking.k8s.io "p1" not found')

    # owned by a RayJob: it goes with it
    job = _custom(api).create_namespaced_custom_object(*RAY, "rayjobs", _job())
    owned = _policy("p2")
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob",
                                             "name": "j1", "uid": job["metadata"]["uid"]}]
    net.create_namespaced_network_policy(NS, owned)
    _custom(api).delete_namespaced_custom_object(*RAY, "rayjobs", "j1")
    _eventually(lambda: kube.objects("networkpolicies") == {})

    found = api.call_api("/apis/networking.k8s.io/v1", "GET", auth_settings=["BearerToken"],
                         response_types_map={200: "object"}, _return_http_data_only=True)
    assert (found["groupVersion"], [r["name"] for r in found["resources"]]) == (
        "networking.k8s.io/v1", ["networkpolicies"])
    error, _ = _api_error(api.call_api, "/apis/nowhere.example/v1", "GET",
                          auth_settings=["BearerToken"], response_types_map={200: "object"})
    assert error.status == 404


def test_http_through_a_port_forward(kube, api):
    """What a test of the launcher does to reach a local Ray dashboard: HTTP over the socket
    of a port-forward (one forward per connection, as with the real client)."""
    import http.client
    import http.server

    from kubernetes.stream import portforward

    class Version(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = json.dumps({"path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    dashboard = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Version)
    server = threading.Thread(target=dashboard.serve_forever, daemon=True)
    server.start()
    try:
        kube.route("*", 8265, dashboard.server_address)   # every head pod's 8265
        _custom(api).create_namespaced_custom_object(*RAY, "rayclusters", _cluster(workers=0))
        head = _wait(api, "rayclusters", "c1", lambda o: _state(o) == "ready")["status"]["head"]
        forward = portforward(_core(api).connect_get_namespaced_pod_portforward,
                              head["podName"], NS, ports="8265")
        connection = http.client.HTTPConnection("127.0.0.1", 8265, timeout=5)
        connection.sock = forward.socket(8265)
        connection.request("GET", "/api/version")
        response = connection.getresponse()
        assert (response.status, json.loads(response.read())) == (200, {"path": "/api/version"})
        connection.close()
        _end(forward)
    finally:
        dashboard.shutdown()
        dashboard.server_close()
        server.join(2)
