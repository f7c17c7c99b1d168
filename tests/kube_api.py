"""A fake Kubernetes API server with a fake KubeRay (v1.7.0) operator, on loopback, for tests of
orchestrate's KubeRay launch backend: the Kubernetes API is faked at the wire, nothing of ours
is. The real `kubernetes` client talks to it over real HTTP (and a real websocket for
port-forward), built from a kubeconfig file the fake writes.

No kube-apiserver can run on these machines: no package here ships one (nor etcd, kind, k3s or
minikube) and no container engine runs. So this module answers the REST API itself, for the
resources a KubeRay launcher uses, with the bodies and errors the real server sends:

    with FakeKube(step=0.02) as kube:
        api = kubernetes.config.new_client_from_config(
            config_file=str(kube.kubeconfig(tmp_path / "kubeconfig")), context="fake")
        kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
            "ray.io", "v1", "default", "rayclusters", body)
        ...
        close_client(api)       # or its connections stay open

    kube.route("c1", 8265, ("127.0.0.1", dashboard_port))   # port-forwards to c1's head reach it
    kube.fail_job("j1")                                      # the RayJob j1 will fail
    kube.write_before_replace("rayclusters", "c1")   # the operator writes first: 409 Conflict
    kube.after_create("rayjobs", lambda job: ("secrets", {...}))   # another client's race
    kube.objects("rayjobs"), kube.submitted("j1"), kube.requests   # what a test asserts on

What it implements:
- bearer-token authentication on every request (401 with a `Status` body otherwise);
- core v1 namespaces (get, list; a fixed set), secrets (`stringData` folded into base64
  `data`), services, pods: create, get, list (label and `metadata.name` field selectors),
  replace, patch, delete, and watch (pods, services, secrets);
- networking.k8s.io/v1 networkpolicies: the same verbs, and discovery of
  `/apis/networking.k8s.io/v1`; stored, not enforced (no pod traffic here to filter). Like
  every built-in resource (and unlike a custom one) they take an unconditional replace;
- ray.io/v1 rayclusters, rayjobs, rayservices: create, get, list, replace (resourceVersion
  required, as for every custom resource, and 409 when stale, as when the operator wrote in
  between: `write_before_replace`), patch (merge patch, RFC 7386;
  JSON patch, RFC 6902; a strategic merge patch is refused with 415, as for any custom
  resource, while for built-in objects it is taken as a plain merge patch), delete (the
  object gets a deletionTimestamp and goes after `delete_delay`, as if a finalizer ran; a
  Secret, Service or NetworkPolicy without finalizers goes at once, as on a real API server),
  the `status`
  subresource, and watch (`watch=true`: newline-delimited JSON events, chunked, until
  `timeoutSeconds`, from `resourceVersion` when given);
- garbage collection by ownerReferences (a deleted RayCluster takes its pods and service, a
  deleted RayJob what it owns);
- KubeRay's CRDs under apiextensions.k8s.io (present, or absent with `kuberay=False`),
  `/version` and discovery of `/apis/ray.io/v1`;
- a kubelet of sorts: a pod runs (phase Running, Ready, a podIP) one step after it is created,
  unless it needs a Secret that does not exist (`CreateContainerConfigError`, as kubelet says);
  a deleted pod may keep running a while (`pod_grace`), counted by the operator meanwhile;
- a KubeRay operator stepping RayCluster, RayJob and RayService through the states and status
  fields of v1.7.0's types (see `_step_cluster`, `_step_job`, `_step_service`), one step every
  `step` seconds. It is a model, not KubeRay's code: the order of the states and the fields are
  KubeRay's, the timing and the exact reasons and messages are the fake's. A RayCluster whose
  `authOptions` name a token Secret (mode `token`) mounts it in its pods, so without that
  Secret its head pod waits (CreateContainerConfigError) and it never becomes ready;
- pod port-forward over a websocket (`v4.channel.k8s.io`), each forwarded port connected to a
  real loopback TCP target the test names with `route()`.

What it does not: no admission (no schema validation of custom resources, no webhooks, no
KubeRay validation rules), no RBAC, no scheduling or resources, no real containers (a test runs
a RayJob's entrypoint itself, from `submitted()`), no batch Jobs (a RayJob's K8sJobMode
submitter is not created), no pagination, no server-side apply, no TLS, no 410 Gone for old
resource versions (the event log is kept whole). It listens on 127.0.0.1 only.

Worth knowing of the real client (36.0.3), which the fake answers as the real server would:
CustomObjectsApi.patch_* sends application/merge-patch+json whatever the body (a JSON patch
needs `_content_type="application/json-patch+json"`), CoreV1Api.patch_* sends a dict as
application/strategic-merge-patch+json; ApiClient.close() leaves its HTTP connections open
(close_client() closes them); a port-forward is one TCP connection to the target per forwarded
port, for as long as the websocket lasts.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import copy
import datetime
import json
import os
import random
import re
import secrets as token_source
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from aiohttp import WSMsgType, web

HOST = "127.0.0.1"
RAY_GROUP = "ray.io"
NETWORKING_GROUP = "networking.k8s.io"
RAY_CRDS = ("rayclusters.ray.io", "rayjobs.ray.io", "rayservices.ray.io")
# The ports KubeRay gives a head container that declares none, by the names it uses.
DEFAULT_HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "serve": 8000}
SUFFIX_LETTERS = "bcdfghjklmnpqrstvwxz2456789"   # what Kubernetes draws generated names from
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
PORT_FORWARD_PROTOCOL = "v4.channel.k8s.io"

Json = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    group: str          # "" for the core group
    plural: str
    kind: str
    status_subresource: bool = True
    generation: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/v1" if self.group else "v1"

    @property
    def qualified(self) -> str:   # how error messages name it: rayclusters.ray.io, secrets
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def custom(self) -> bool:   # a CRD's, served by the API server's generic code
        return self.group == RAY_GROUP


RESOURCES = {r.plural: r for r in (
    Resource("", "secrets", "Secret", status_subresource=False, generation=False),
    Resource("", "services", "Service", generation=False),
    Resource("", "pods", "Pod"),
    Resource(NETWORKING_GROUP, "networkpolicies", "NetworkPolicy", status_subresource=False),
    Resource(RAY_GROUP, "rayclusters", "RayCluster"),
    Resource(RAY_GROUP, "rayjobs", "RayJob"),
    Resource(RAY_GROUP, "rayservices", "RayService"),
)}
WATCHABLE = {"pods", "rayclusters", "rayjobs", "rayservices", "services", "secrets",
             "networkpolicies"}


class Request(NamedTuple):
    """One request as the fake received it (the Authorization header left out)."""
    method: str
    path: str                 # with its query
    headers: dict[str, str]
    body: str


class ApiError(Exception):
    """Answered as a Kubernetes Status body."""

    def __init__(self, code: int, reason: str, message: str, details: Json | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def response(self) -> web.Response:
        body: Json = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            body["details"] = self.details
        return web.json_response(body, status=self.code)


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found',
                    {"name": name, "group": res.group, "kind": res.plural})


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def suffix() -> str:
    return "".join(random.choice(SUFFIX_LETTERS) for _ in range(5))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(document: Any, operations: list) -> Any:
    """RFC 6902 (add, remove, replace, move, copy, test); ValueError when one does not apply."""
    document = copy.deepcopy(document)

    def split(pointer: str) -> list[str]:
        if pointer == "":
            return []
        if not pointer.startswith("/"):
            raise ValueError(f"bad JSON pointer {pointer!r}")
        return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]

    def parent(parts: list[str]) -> tuple[Any, str]:
        node = document
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node, parts[-1]

    def get(parts: list[str]) -> Any:
        node, key = parent(parts) if parts else (None, "")
        if not parts:
            return document
        return node[int(key)] if isinstance(node, list) else node[key]

    def remove(parts: list[str]) -> Any:
        node, key = parent(parts)
        return node.pop(int(key)) if isinstance(node, list) else node.pop(key)

    def add(parts: list[str], value: Any) -> None:
        nonlocal document
        if not parts:
            document = value
            return
        node, key = parent(parts)
        if isinstance(node, list):
            index = len(node) if key == "-" else int(key)
            if not 0 <= index <= len(node):
                raise IndexError(key)
            node.insert(index, value)
        else:
            node[key] = value

    try:
        for op in operations:
            kind, parts = op["op"], split(op["path"])
            if kind == "add":
                add(parts, copy.deepcopy(op["value"]))
            elif kind == "remove":
                remove(parts)
            elif kind == "replace":
                get(parts)
                if parts:
                    remove(parts)
                add(parts, copy.deepcopy(op["value"]))
            elif kind in ("move", "copy"):
                source = split(op["from"])
                value = remove(source) if kind == "move" else copy.deepcopy(get(source))
                add(parts, value)
            elif kind == "test":
                if get(parts) != op["value"]:
                    raise ValueError(f"test failed at {op['path']}")
            else:
                raise ValueError(f"unknown op {kind!r}")
    except (KeyError, IndexError, TypeError) as e:
        raise ValueError(f"the patch does not apply: {e!r}") from e
    return document


def parse_selector(text: str | None) -> list[tuple[str, str, tuple[str, ...]]]:
    """A label selector (`a=b,c!=d,e,!f,g in (x,y)`) as (key, operator, values) rules."""
    rules: list[tuple[str, str, tuple[str, ...]]] = []
    for raw in re.findall(r"(?:[^,(]|\([^)]*\))+", text or ""):
        term = raw.strip()
        if not term:
            continue
        if m := re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", term):
            rules.append((m[1], m[2], tuple(v.strip() for v in m[3].split(","))))
        elif m := re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*(\S*)", term):
            rules.append((m[1], "!=" if m[2] == "!=" else "=", (m[3],)))
        elif term.startswith("!"):
            rules.append((term[1:].strip(), "!", ()))
        else:
            rules.append((term, "exists", ()))
    return rules


def selected(obj: Json, rules: list, fields: dict[str, str]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for key, op, values in rules:
        has, value = key in labels, labels.get(key)
        if ((op == "=" and value != values[0]) or (op == "!=" and value == values[0])
                or (op == "in" and value not in values) or (op == "notin" and value in values)
                or (op == "exists" and not has) or (op == "!" and has)):
            return False
    meta = obj.get("metadata", {})
    return all(meta.get(key.removeprefix("metadata.")) == value for key, value in fields.items())


def parse_fields(text: str | None) -> dict[str, str]:
    fields = {}
    for term in (text or "").split(","):
        if term.strip():
            key, _, value = term.partition("=")
            key = key.rstrip("=")
            if key not in ("metadata.name", "metadata.namespace"):
                raise ApiError(400, "BadRequest", f'"{key}" is not a known field selector')
            fields[key] = value.lstrip("=")
    return fields


def truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def condition(type_: str, ok: bool, reason: str, message: str = "", generation: int = 0) -> Json:
    return {"type": type_, "status": "True" if ok else "False", "reason": reason,
            "message": message, "lastTransitionTime": now(), "observedGeneration": generation}


def same_conditions(old: list | None, new: list) -> bool:
    def strip(items):
        return [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in items or []]
    return strip(old) == strip(new)


@dataclass
class _Event:
    rv: int
    plural: str
    namespace: str
    type: str
    obj: Json


@dataclass
class _Plan:
    """What a finished RayJob's deletion rules still have to do."""
    steps: list[tuple[float, str]] = field(default_factory=list)   # (seconds, policy)


class FakeKube:
    """The fake API server and operator, in a daemon thread with its own event loop.

    namespaces: the namespaces that exist. kuberay: whether KubeRay's CRDs are installed (the
    ray.io API answers 404 without them). step: seconds between two steps of the operator (and
    of the kubelet). delete_delay: seconds a deleted object keeps a deletionTimestamp before it
    goes. seconds_scale: how the operator scales a spec's seconds (TTLs): 60 s become
    60 * seconds_scale. job_outcome(name) -> "SUCCEEDED" | "FAILED" | "RUNNING" decides how a
    RayJob ends ("RUNNING": it runs until `set_job_outcome`); default SUCCEEDED. auth_options
    False: the API server has KubeRay's CRDs from before v1.5, and prunes a RayCluster's
    authOptions as the real one would. pod_grace: seconds a deleted pod keeps running (its
    containers' graceful termination) before it goes; meanwhile the operator counts it as
    KubeRay does: among the ready workers, and as the head (its name, HeadPodReady) while it
    lasts. With 0 (the default) a deleted pod is not counted.
    """

    def __init__(self, *, namespaces: tuple[str, ...] = ("default",), kuberay: bool = True,
                 step: float = 0.2, delete_delay: float = 0.05, seconds_scale: float = 0.001,
                 job_outcome: Callable[[str], str] | None = None, token: str | None = None,
                 auth_options: bool = True, pod_grace: float = 0.0):
        self.namespaces = {name: {"uid": str(uuid.uuid4()), "created": now()} for name in namespaces}
        self.kuberay = kuberay
        self.auth_options = auth_options
        self.step = step
        self.delete_delay = delete_delay
        self.pod_grace = pod_grace
        self.seconds_scale = seconds_scale
        self.job_outcome = job_outcome
        self.token = token or token_source.token_urlsafe(24)
        self.requests: list[Request] = []
        self.errors: list[BaseException] = []      # the fake's own failures (tests check empty)
        self.port = 0
        self._store: dict[str, dict[tuple[str, str], Json]] = {p: {} for p in RESOURCES}
        self._by_uid: dict[str, tuple[str, str, str]] = {}
        self._log: list[_Event] = []
        self._log_rvs: list[int] = []
        self._rv = 1000
        self._ips = {"pod": 1, "service": 1}
        self._routes: dict[tuple[str, int], tuple[str, int]] = {}
        self._outcomes: dict[tuple[str, str], str] = {}
        self._before_replace: dict[tuple[str, str, str], int] = {}
        self._after_create: dict[str, Callable[[Json], tuple[str, Json]]] = {}
        self._submitted: dict[tuple[str, str], Json] = {}
        self._finished: set[str] = set()           # uids of RayJobs whose deletion plan started
        self._running: dict[tuple[str, str, str], asyncio.Task] = {}
        self._again: set[tuple[str, str, str]] = set()
        self._tasks: set[asyncio.Task] = set()
        self._sockets: set[web.WebSocketResponse] = set()
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._tick: asyncio.Event | None = None

    # ---- life cycle -------------------------------------------------------------------

    def start(self) -> FakeKube:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="fake-kube", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), loop).result(10)
        return self

    def stop(self) -> None:
        """Stop the operator, end open watches and port-forwards, close the listener, join the
        thread. Safe to call twice."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            assert self._thread is not None
            self._thread.join(10)
            loop.close()

    def __enter__(self) -> FakeKube:
        return self.start()

    def __exit__(self, kind, value, tb) -> None:
        self.stop()
        if kind is None and self.errors:
            raise RuntimeError(f"the fake API server failed: {self.errors!r}") from self.errors[0]

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    async def _serve(self) -> None:
        self._tick = asyncio.Event()
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        self._routes_of(app)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None,
                                     handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, 0)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        addresses = {s.getsockname()[0] for s in sockets}
        # the guard: loopback only, whatever changes above
        assert addresses == {HOST}, f"the fake API server must listen on {HOST} only: {addresses}"
        self.port = sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        self._stopping = True
        self._changed()
        tasks = list(self._running.values()) + list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run fn in the server's loop (where the store lives) and return what it returns."""
        assert self._loop is not None, "the fake API server is not running"

        async def run():
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    # ---- test helpers -----------------------------------------------------------------

    def kubeconfig(self, path: str | os.PathLike, *, context: str = "fake",
                   namespace: str = "default", token: str | None = None) -> Path:
        """A kubeconfig file (mode 0600) for this server: one cluster, one bearer-token user,
        one context (the current one)."""
        path = Path(path)
        config = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": f"{context}-cluster", "cluster": {"server": self.url}}],
            "users": [{"name": f"{context}-user", "user": {"token": token or self.token}}],
            "contexts": [{"name": context, "context": {
                "cluster": f"{context}-cluster", "user": f"{context}-user",
                "namespace": namespace}}],
            "current-context": context,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(config, f)
        os.chmod(path, 0o600)
        return path

    def client(self, folder: str | os.PathLike, *, context: str = "fake"):
        """The real client for this server, built as a launcher builds it: from a kubeconfig
        file (written into folder). Close it with close_client()."""
        import kubernetes

        path = self.kubeconfig(Path(folder) / "kubeconfig", context=context)
        return kubernetes.config.new_client_from_config(config_file=str(path), context=context)

    def objects(self, plural: str, namespace: str = "default") -> dict[str, Json]:
        """A copy of the stored objects of a kind in a namespace, by name."""
        return self._call(lambda: {name: copy.deepcopy(obj) for (ns, name), obj
                                   in self._store[plural].items() if ns == namespace})

    def submitted(self, name: str, namespace: str = "default") -> Json:
        """What a RayJob submitted, as its spec gave it (entrypoint, runtimeEnvYAML,
        submissionMode, entrypointNumCpus, ...), kept after the RayJob is gone."""
        return copy.deepcopy(self._submitted[(namespace, name)])

    def route(self, name: str, remote_port: int, target: tuple[str, int]) -> None:
        """Port-forwards to `remote_port` of the pod `name` (or of the head pod of the cluster
        `name`, or of any head pod when name is "*") reach `target`, a real TCP listener."""
        self._routes[(name, remote_port)] = target

    def set_job_outcome(self, name: str, outcome: str, namespace: str = "default") -> None:
        """How the RayJob `name` ends: SUCCEEDED, FAILED, or RUNNING (it keeps running)."""
        assert outcome in ("SUCCEEDED", "FAILED", "RUNNING"), outcome
        self._outcomes[(namespace, name)] = outcome
        if self._loop is not None:
            self._call(lambda: self._kick("rayjobs", namespace, name))

    def fail_job(self, name: str, namespace: str = "default") -> None:
        self.set_job_outcome(name, "FAILED", namespace)

    def write_before_replace(self, plural: str, name: str, namespace: str = "default",
                             times: int = 1) -> None:
        """The operator writes the object's status just before each of the next `times`
        replaces (PUT) of it arrives, as if between the client's read and its replace: each of
        those replaces is at a stale resourceVersion (409 Conflict)."""
        self._before_replace[(plural, namespace, name)] = times

    def after_create(self, plural: str, make: Callable[[Json], tuple[str, Json]]) -> None:
        """Once an object of `plural` is created through the API, and before the answer
        leaves, the fake creates make(that object) = (plural, body) in its namespace: another
        client watching the API server and racing the one that created it."""
        self._after_create[plural] = make

    # ---- the store --------------------------------------------------------------------

    def _changed(self) -> None:
        if self._tick is not None:
            old, self._tick = self._tick, asyncio.Event()
            old.set()

    def _record(self, plural: str, namespace: str, type_: str, obj: Json) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._log.append(_Event(self._rv, plural, namespace, type_, copy.deepcopy(obj)))
        self._log_rvs.append(self._rv)
        self._changed()

    def _get(self, plural: str, namespace: str, name: str) -> Json | None:
        return self._store[plural].get((namespace, name))

    def _must_get(self, plural: str, namespace: str, name: str) -> Json:
        obj = self._get(plural, namespace, name)
        if obj is None:
            raise not_found(RESOURCES[plural], name)
        return obj

    def _create(self, plural: str, namespace: str, obj: Json, *, by_api: bool = False) -> Json:
        res = RESOURCES[plural]
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + suffix()
        name = meta.get("name") or ""
        if not name or len(name) > 253 or not NAME.match(name):
            raise ApiError(422, "Invalid", f'{res.kind}{"." + res.group if res.group else ""} '
                           f'"{name}" is invalid: metadata.name: Invalid value: "{name}": a '
                           "lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                           "characters, '-' or '.', and must start and end with an alphanumeric "
                           "character", {"name": name, "group": res.group, "kind": res.kind,
                                         "causes": [{"reason": "FieldValueInvalid",
                                                     "field": "metadata.name"}]})
        if (namespace, name) in self._store[plural]:
            raise ApiError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists',
                           {"name": name, "group": res.group, "kind": res.plural})
        if obj.get("kind", res.kind) != res.kind or obj.get("apiVersion", res.api_version) \
                != res.api_version:
            raise ApiError(400, "BadRequest", f"the API version in the data "
                           f"({obj.get('apiVersion')}) does not match the expected API version "
                           f"({res.api_version})")
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(key, None)
        meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now())
        if res.generation:
            meta["generation"] = 1
        if by_api and res.status_subresource and res.custom:
            obj.pop("status", None)
        if by_api and plural == "rayclusters" and not self.auth_options:
            self._prune_auth(obj)
        if plural == "secrets":
            self._fold_string_data(obj)
        elif plural == "services":
            spec = obj.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            if spec.get("clusterIP") != "None":
                spec["clusterIP"] = f"10.96.0.{self._ips['service']}"
                spec["clusterIPs"] = [spec["clusterIP"]]
                self._ips["service"] += 1
            obj.setdefault("status", {"loadBalancer": {}})
        elif plural == "pods":
            obj.setdefault("status", {"phase": "Pending", "qosClass": "BestEffort"})
        self._store[plural][(namespace, name)] = obj
        self._by_uid[meta["uid"]] = (plural, namespace, name)
        self._record(plural, namespace, "ADDED", obj)
        self._react(plural, namespace, obj, created=True)
        return obj

    @staticmethod
    def _prune_auth(obj: Json) -> None:
        """What an API server with KubeRay's CRDs from before v1.5 does to authOptions: its
        schema has no such field, so it drops it without a word (structural pruning)."""
        (obj.get("spec") or {}).pop("authOptions", None)

    def _write(self, plural: str, namespace: str, obj: Json, *, by_api: bool = False) -> Json:
        """Store a changed object (its generation bumped when more than metadata and status
        changed), as MODIFIED."""
        if by_api and plural == "rayclusters" and not self.auth_options:
            self._prune_auth(obj)
        old = self._store[plural][(namespace, obj["metadata"]["name"])]
        res = RESOURCES[plural]
        if res.generation and {k: v for k, v in old.items() if k not in ("metadata", "status")} \
                != {k: v for k, v in obj.items() if k not in ("metadata", "status")}:
            obj["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        self._store[plural][(namespace, obj["metadata"]["name"])] = obj
        self._record(plural, namespace, "MODIFIED", obj)
        self._react(plural, namespace, obj, by_api=by_api)
        return obj

    def _delete(self, plural: str, namespace: str, name: str) -> Json:
        """Mark the object deleted; it goes after delete_delay (as if its finalizers ran).

        A Secret, Service or NetworkPolicy with no finalizers goes at once, as on a real API
        server: only Ray's custom resources (the operator's finalizers) and pods (their grace
        period) linger.
        """
        obj = self._must_get(plural, namespace, name)
        if plural in ("secrets", "services", "networkpolicies") and \
                not obj["metadata"].get("finalizers"):
            self._remove(plural, namespace, name, obj["metadata"]["uid"])
            return obj
        if "deletionTimestamp" not in obj["metadata"]:
            obj = copy.deepcopy(obj)
            obj["metadata"]["deletionTimestamp"] = now()
            obj["metadata"]["deletionGracePeriodSeconds"] = 0
            self._write(plural, namespace, obj)
            uid = obj["metadata"]["uid"]
            delay = self.delete_delay + (self.pod_grace if plural == "pods" else 0)
            self._later(delay, lambda: self._remove(plural, namespace, name, uid))
        return obj

    def _remove(self, plural: str, namespace: str, name: str, uid: str) -> None:
        obj = self._get(plural, namespace, name)
        if obj is None or obj["metadata"]["uid"] != uid:
            return
        del self._store[plural][(namespace, name)]
        self._by_uid.pop(uid, None)
        self._record(plural, namespace, "DELETED", obj)
        self._kick_owners(obj)
        # the garbage collector: what this object owned goes too
        for dep_plural, items in self._store.items():
            for (ns, dep_name), dep in list(items.items()):
                owners = dep["metadata"].get("ownerReferences") or []
                if ns == namespace and any(o.get("uid") == uid for o in owners):
                    self._delete(dep_plural, ns, dep_name)

    def _fold_string_data(self, obj: Json) -> None:
        """A Secret keeps base64 `data`, as the API server stores it; `stringData` is folded
        into it and never stored."""
        data = obj.get("data") or {}
        for key, value in data.items():
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, TypeError) as e:
                raise ApiError(400, "BadRequest", f"illegal base64 data in data[{key!r}]") from e
        for key, value in (obj.pop("stringData", None) or {}).items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        if data:
            obj["data"] = data
        obj.setdefault("type", "Opaque")

    def _later(self, delay: float, fn: Callable[[], Any]) -> None:
        async def run():
            await asyncio.sleep(delay)
            try:
                fn()
            except Exception as e:   # noqa: BLE001 - kept for the test to see
                self.errors.append(e)
        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- the HTTP API -----------------------------------------------------------------

    def _routes_of(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/version", self._version)
        r.add_get("/version/", self._version)   # what VersionApi asks
        r.add_get("/apis/{group}/v1", self._discovery)
        r.add_get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", self._crds)
        r.add_get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", self._crd)
        r.add_get("/api/v1/namespaces", self._namespaces)
        r.add_get("/api/v1/namespaces/{name}", self._namespace)
        r.add_get("/api/v1/namespaces/{ns}/pods/{name}/portforward", self._portforward)
        for prefix in ("/api/v1", "/apis/{group}/v1"):
            r.add_route("*", prefix + "/namespaces/{ns}/{plural}", self._collection)
            r.add_route("*", prefix + "/namespaces/{ns}/{plural}/{name}", self._item)
            r.add_route("*", prefix + "/namespaces/{ns}/{plural}/{name}/status", self._status)
            r.add_get(prefix + "/{plural}", self._collection)

    @web.middleware
    async def _middleware(self, request: web.Request, handler) -> web.StreamResponse:
        body = await request.text() if request.can_read_body else ""
        headers = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
        self.requests.append(Request(request.method, request.path_qs, headers, body))
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return ApiError(401, "Unauthorized", "Unauthorized").response()
        try:
            return await handler(request)
        except ApiError as e:
            return e.response()
        except web.HTTPException as e:
            if e.status == 404:
                return ApiError(404, "NotFound", "the server could not find the requested "
                                "resource", {}).response()
            raise
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as e:   # noqa: BLE001 - the fake's own bug: a 500, and kept
            self.errors.append(e)
            return ApiError(500, "InternalError", f"the fake API server failed: {e!r}").response()

    def _resource(self, request: web.Request) -> Resource:
        group = request.match_info.get("group", "")
        res = RESOURCES.get(request.match_info["plural"])
        if res is None or res.group != group or (group == RAY_GROUP and not self.kuberay):
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        return res

    def _namespace_of(self, request: web.Request) -> str:
        ns = request.match_info["ns"]
        if ns not in self.namespaces:
            raise ApiError(404, "NotFound", f'namespaces "{ns}" not found',
                           {"name": ns, "kind": "namespaces"})
        return ns

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"major": "1", "minor": "34", "gitVersion": "v1.34.0-fake",
                                  "gitCommit": "", "gitTreeState": "clean", "buildDate": "",
                                  "goVersion": "", "compiler": "gc", "platform": "linux/amd64"})

    async def _discovery(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        served = [res for res in RESOURCES.values() if res.group == group]
        if not served or (group == RAY_GROUP and not self.kuberay):
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        resources = []
        for res in served:
            verbs = ["delete", "deletecollection", "get", "list", "patch", "create", "update",
                     "watch"]
            resources.append({"name": res.plural, "singularName": res.kind.lower(),
                              "namespaced": True, "kind": res.kind, "verbs": verbs})
            if res.status_subresource:
                resources.append({"name": f"{res.plural}/status", "singularName": "",
                                  "namespaced": True, "kind": res.kind,
                                  "verbs": ["get", "patch", "update"]})
        return web.json_response({"kind": "APIResourceList", "apiVersion": "v1",
                                  "groupVersion": f"{group}/v1", "resources": resources})

    def _crd_body(self, name: str) -> Json:
        plural = name.split(".", maxsplit=1)[0]
        res = RESOURCES[plural]
        return {
            "kind": "CustomResourceDefinition", "apiVersion": "apiextensions.k8s.io/v1",
            "metadata": {"name": name, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
                         "resourceVersion": "1", "generation": 1, "creationTimestamp": now(),
                         "annotations": {"controller-gen.kubebuilder.io/version": "v0.17.3"}},
            "spec": {"group": RAY_GROUP, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": res.kind.lower(), "kind": res.kind,
                               "listKind": res.kind + "List"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": self._crd_schema(res.kind)}}]},
            "status": {"acceptedNames": {"plural": plural, "kind": res.kind},
                       "storedVersions": ["v1"],
                       "conditions": [condition("NamesAccepted", True, "NoConflicts"),
                                      condition("Established", True, "InitialNamesAccepted")]},
        }

    def _crd_schema(self, kind: str) -> Json:
        """KubeRay v1.7.0's own schema (the copy orchestrate ships); without `auth_options`,
        a RayCluster's as KubeRay's before v1.5 had it: no authOptions."""
        from orchestrator.launch.kuberay.check import crd_schema

        schema = copy.deepcopy(crd_schema(kind))
        if kind == "RayCluster" and not self.auth_options:
            schema["properties"]["spec"]["properties"].pop("authOptions", None)
        return schema

    async def _crd(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if not self.kuberay or name not in RAY_CRDS:
            raise ApiError(404, "NotFound", f'customresourcedefinitions.apiextensions.k8s.io '
                           f'"{name}" not found', {"name": name, "group": "apiextensions.k8s.io",
                                                   "kind": "customresourcedefinitions"})
        return web.json_response(self._crd_body(name))

    async def _crds(self, request: web.Request) -> web.Response:
        items = [self._crd_body(n) for n in RAY_CRDS] if self.kuberay else []
        return web.json_response({"kind": "CustomResourceDefinitionList",
                                  "apiVersion": "apiextensions.k8s.io/v1",
                                  "metadata": {"resourceVersion": str(self._rv)}, "items": items})

    def _namespace_body(self, name: str) -> Json:
        info = self.namespaces[name]
        return {"kind": "Namespace", "apiVersion": "v1",
                "metadata": {"name": name, "uid": info["uid"], "resourceVersion": "1",
                             "creationTimestamp": info["created"],
                             "labels": {"kubernetes.io/metadata.name": name}},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}

    async def _namespaces(self, request: web.Request) -> web.Response:
        return web.json_response({"kind": "NamespaceList", "apiVersion": "v1",
                                  "metadata": {"resourceVersion": str(self._rv)},
                                  "items": [self._namespace_body(n) for n in self.namespaces]})

    async def _namespace(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.namespaces:
            raise ApiError(404, "NotFound", f'namespaces "{name}" not found',
                           {"name": name, "kind": "namespaces"})
        return web.json_response(self._namespace_body(name))

    async def _body(self, request: web.Request) -> Any:
        try:
            return json.loads(await request.text())
        except json.JSONDecodeError as e:
            raise ApiError(400, "BadRequest", f"the body of the request was not JSON: {e}") from e

    def _listed(self, res: Resource, obj: Json) -> Json:
        # built-in lists leave kind and apiVersion out of their items; custom resource lists
        # keep them
        if res.custom:
            return obj
        return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        res = self._resource(request)
        ns = self._namespace_of(request) if "ns" in request.match_info else None
        if request.method == "POST" and ns is not None:
            obj = await self._body(request)
            if not isinstance(obj, dict):
                raise ApiError(400, "BadRequest", "the body must be an object")
            created = self._create(res.plural, ns, obj, by_api=True)
            answer = copy.deepcopy(created)
            if res.plural in self._after_create:
                plural, body = self._after_create[res.plural](copy.deepcopy(created))
                self._create(plural, ns, body)
            return web.json_response(answer, status=201)
        if request.method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported here")
        rules = parse_selector(request.query.get("labelSelector"))
        fields = parse_fields(request.query.get("fieldSelector"))
        if truthy(request.query.get("watch")):
            return await self._watch(request, res, ns, rules, fields)
        items = [self._listed(res, obj) for (o_ns, _), obj in sorted(self._store[res.plural].items())
                 if (ns is None or o_ns == ns) and selected(obj, rules, fields)]
        return web.json_response({"kind": res.kind + "List", "apiVersion": res.api_version,
                                  "metadata": {"resourceVersion": str(self._rv), "continue": ""},
                                  "items": items})

    async def _item(self, request: web.Request) -> web.Response:
        res = self._resource(request)
        ns, name = self._namespace_of(request), request.match_info["name"]
        obj = self._must_get(res.plural, ns, name)
        if request.method == "GET":
            return web.json_response(obj)
        if request.method == "DELETE":
            deleted = self._delete(res.plural, ns, name)
            if res.plural == "pods":
                return web.json_response(deleted)
            return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                      "status": "Success",
                                      "details": {"name": name, "group": res.group,
                                                  "kind": res.plural,
                                                  "uid": obj["metadata"]["uid"]}})
        if request.method == "PUT":
            new = await self._body(request)
            obj = self._written_between(res.plural, ns, obj)
            self._check_update(res, obj, new, name)
        elif request.method == "PATCH":
            new = self._patched(res, obj, await self._body(request),
                                request.headers.get("Content-Type", ""))
            self._check_update(res, obj, new, name, patch=True)
        else:
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported here")
        # the main resource does not change status, nor what the server keeps in metadata
        if res.status_subresource:
            new.pop("status", None)
            if "status" in obj:
                new["status"] = copy.deepcopy(obj["status"])
        self._keep_server_metadata(obj, new)
        if res.plural == "secrets":
            self._fold_string_data(new)
        return web.json_response(self._write(res.plural, ns, new, by_api=True))

    async def _status(self, request: web.Request) -> web.Response:
        res = self._resource(request)
        if not res.status_subresource:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        ns, name = self._namespace_of(request), request.match_info["name"]
        obj = self._must_get(res.plural, ns, name)
        if request.method == "GET":
            return web.json_response(obj)
        if request.method == "PUT":
            new = await self._body(request)
            self._check_update(res, obj, new, name)
        elif request.method == "PATCH":
            new = self._patched(res, obj, await self._body(request),
                                request.headers.get("Content-Type", ""))
            self._check_update(res, obj, new, name, patch=True)
        else:
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported here")
        # the status subresource changes status only
        status = new.get("status")
        new = copy.deepcopy(obj)
        if status is None:
            new.pop("status", None)
        else:
            new["status"] = status
        return web.json_response(self._write(res.plural, ns, new, by_api=True))

    def _written_between(self, plural: str, namespace: str, obj: Json) -> Json:
        """The object as it is once the operator wrote its status, when a test asked for that
        before this replace (write_before_replace)."""
        key = (plural, namespace, obj["metadata"]["name"])
        if not self._before_replace.get(key):
            return obj
        self._before_replace[key] -= 1
        written = copy.deepcopy(obj)
        written.setdefault("status", {})["lastUpdateTime"] = now()
        return self._write(plural, namespace, written)

    def _patched(self, res: Resource, obj: Json, patch: Any, content_type: str) -> Json:
        kind = content_type.split(";", maxsplit=1)[0].strip().lower()
        if kind == "application/json-patch+json":
            if not isinstance(patch, list):
                raise ApiError(400, "BadRequest", "a JSON patch must be a list of operations")
            try:
                new = json_patch(obj, patch)
            except ValueError as e:
                raise ApiError(422, "Invalid", str(e)) from e
        elif kind in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            if not isinstance(patch, dict):
                raise ApiError(400, "BadRequest", f"a merge patch must be a JSON object ({kind} "
                               f"with a {type(patch).__name__} body)")
            if kind.startswith("application/strategic") and res.custom:
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                               "unknown format - accepted media types include: "
                               "application/json-patch+json, application/merge-patch+json, "
                               "application/apply-patch+yaml")
            new = merge_patch(obj, patch)
        else:
            raise ApiError(415, "UnsupportedMediaType", f"the fake does not take {kind!r} patches")
        if not isinstance(new, dict):
            raise ApiError(422, "Invalid", "the patch does not leave an object")
        return new

    def _check_update(self, res: Resource, old: Json, new: Any, name: str, *,
                      patch: bool = False) -> None:
        if not isinstance(new, dict):
            raise ApiError(400, "BadRequest", "the body must be an object")
        meta = new.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name of the object "
                           f"({meta.get('name')}) does not match the name on the URL ({name})")
        meta["name"] = name
        given = meta.get("resourceVersion")
        if not given and not patch and res.custom:
            # custom resources take no unconditional update (built-in ones do)
            raise ApiError(422, "Invalid", f'{res.kind}.{res.group} "{name}" is invalid: '
                           "metadata.resourceVersion: Invalid value: 0x0: must be specified for "
                           "an update", {"name": name, "group": res.group, "kind": res.kind})
        if given and given != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} '
                           f'"{name}": the object has been modified; please apply your changes '
                           "to the latest version and try again",
                           {"name": name, "group": res.group, "kind": res.plural})
        new["kind"], new["apiVersion"] = res.kind, res.api_version

    def _keep_server_metadata(self, old: Json, new: Json) -> None:
        meta = new["metadata"]
        for key in ("uid", "creationTimestamp", "namespace", "generation", "deletionTimestamp",
                    "deletionGracePeriodSeconds"):
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
            else:
                meta.pop(key, None)

    async def _watch(self, request: web.Request, res: Resource, ns: str | None, rules: list,
                     fields: dict[str, str]) -> web.StreamResponse:
        """Events as the API server streams them: one JSON object a line, chunked, until
        timeoutSeconds or the client goes. Without a resourceVersion (or with "0") the current
        objects come first, as ADDED."""
        if res.plural not in WATCHABLE:
            raise ApiError(405, "MethodNotAllowed", f"the fake does not watch {res.plural}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(request.query.get("timeoutSeconds") or 1800)
        since = request.query.get("resourceVersion") or "0"
        if not since.isdigit():
            raise ApiError(400, "BadRequest", f"invalid resource version {since!r}")

        def wanted(o_ns: str, obj: Json) -> bool:
            return (ns is None or o_ns == ns) and selected(obj, rules, fields)

        response = web.StreamResponse(headers={"Content-Type": "application/json",
                                               "Cache-Control": "no-cache, private"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        lines = []
        if since == "0":
            cursor = len(self._log)
            lines = [{"type": "ADDED", "object": copy.deepcopy(obj)} for (o_ns, _), obj
                     in sorted(self._store[res.plural].items()) if wanted(o_ns, obj)]
        else:
            cursor = bisect.bisect_right(self._log_rvs, int(since))
        try:
            while True:
                for event in self._log[cursor:]:
                    if event.plural == res.plural and wanted(event.namespace, event.obj):
                        lines.append({"type": event.type, "object": event.obj})
                cursor = len(self._log)
                if lines:
                    await response.write("".join(json.dumps(e) + "\n" for e in lines).encode())
                    lines = []
                tick = self._tick
                left = deadline - loop.time()
                if self._stopping or left <= 0 or tick is None:
                    break
                try:
                    await asyncio.wait_for(tick.wait(), left)
                except asyncio.TimeoutError:
                    pass
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass   # the client went
        return response

    # ---- port-forward -----------------------------------------------------------------

    def _target(self, ns: str, pod: Json, port: int) -> tuple[str, int] | None:
        name = pod["metadata"]["name"]
        labels = pod["metadata"].get("labels") or {}
        if (name, port) in self._routes:
            return self._routes[(name, port)]
        if labels.get("ray.io/node-type") == "head":
            for key in (labels.get("ray.io/cluster", ""), "*"):
                if (key, port) in self._routes:
                    return self._routes[(key, port)]
        return None

    async def _portforward(self, request: web.Request) -> web.StreamResponse:
        """Kubernetes' websocket port-forward (v4.channel.k8s.io): for the i-th port, data on
        channel 2i and errors on 2i+1, each channel's first frame its port (2 bytes, little
        endian); every frame is binary, its first byte the channel."""
        ns, name = self._namespace_of(request), request.match_info["name"]
        pod = self._must_get("pods", ns, name)
        ports = [int(p) for value in request.query.getall("ports", []) for p in value.split(",")]
        if not ports:
            raise ApiError(400, "BadRequest", "at least one port must be given")
        if request.headers.get("Upgrade", "").lower() != "websocket":
            raise ApiError(400, "BadRequest", "Upgrade request required")
        if pod.get("status", {}).get("phase") != "Running":
            raise ApiError(400, "BadRequest", f"unable to upgrade connection: pod {name} is not "
                           "running")
        ws = web.WebSocketResponse(protocols=(PORT_FORWARD_PROTOCOL,))
        await ws.prepare(request)
        self._sockets.add(ws)
        writers: list[asyncio.StreamWriter | None] = []
        pumps: list[asyncio.Task] = []
        open_targets = 0

        async def pump(index: int, reader: asyncio.StreamReader) -> None:
            """The target's bytes to the client; when every target has closed, the websocket
            closes too."""
            nonlocal open_targets
            try:
                while data := await reader.read(65536):
                    await ws.send_bytes(bytes([2 * index]) + data)
            except (ConnectionError, RuntimeError):
                pass
            open_targets -= 1
            if open_targets == 0:
                await ws.close()

        for index, port in enumerate(ports):
            prefix = port.to_bytes(2, "little")
            await ws.send_bytes(bytes([2 * index]) + prefix)
            await ws.send_bytes(bytes([2 * index + 1]) + prefix)
            target = self._target(ns, pod, port)
            try:
                if target is None:
                    raise ConnectionRefusedError(f"no route to port {port} of pod {name}")
                reader, writer = await asyncio.open_connection(*target)
            except OSError as e:
                writers.append(None)
                await ws.send_bytes(bytes([2 * index + 1]) + (
                    f"error forwarding port {port} to pod {name}, uid : {e}").encode())
                continue
            writers.append(writer)
            open_targets += 1
            pumps.append(asyncio.get_running_loop().create_task(pump(index, reader)))
        try:
            async for message in ws:
                if message.type != WSMsgType.BINARY or not message.data:
                    continue
                channel, data = message.data[0], message.data[1:]
                index = channel // 2
                if channel % 2 == 0 and index < len(writers) and writers[index] is not None:
                    writer = writers[index]
                    assert writer is not None
                    writer.write(data)
                    await writer.drain()
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for writer in writers:
                if writer is not None:
                    writer.close()
            self._sockets.discard(ws)
        return ws

    # ---- the operator -----------------------------------------------------------------

    def _react(self, plural: str, namespace: str, obj: Json, *, created: bool = False,
               by_api: bool = False) -> None:
        """Who steps next after a write: the object itself (when the API wrote it, or it is
        new), its owners, and for a Secret the pods of its namespace that wait for one."""
        name = obj["metadata"]["name"]
        if plural in ("pods", "rayclusters", "rayjobs", "rayservices") and (created or by_api):
            self._kick(plural, namespace, name)
        self._kick_owners(obj)
        if plural == "secrets":
            for (ns, pod_name), pod in self._store["pods"].items():
                if ns == namespace and pod.get("status", {}).get("phase") == "Pending":
                    self._kick("pods", ns, pod_name)

    def _kick_owners(self, obj: Json) -> None:
        for owner in obj["metadata"].get("ownerReferences") or []:
            if owner.get("uid") in self._by_uid:
                self._kick(*self._by_uid[owner["uid"]])

    def _kick(self, plural: str, namespace: str, name: str) -> None:
        if self._stopping:
            return
        key = (plural, namespace, name)
        if key in self._running:
            self._again.add(key)
            return
        task = asyncio.get_running_loop().create_task(self._reconcile(key))
        self._running[key] = task

    async def _reconcile(self, key: tuple[str, str, str]) -> None:
        """Step one object every `step` seconds while its step says there is more to do."""
        plural, namespace, name = key
        steps = {"pods": self._step_pod, "rayclusters": self._step_cluster,
                 "rayjobs": self._step_job, "rayservices": self._step_service}
        try:
            while True:
                await asyncio.sleep(self.step)
                self._again.discard(key)
                obj = self._get(plural, namespace, name)
                more = False
                if obj is not None and "deletionTimestamp" not in obj["metadata"]:
                    more = steps[plural](namespace, copy.deepcopy(obj))
                if not more and key not in self._again:
                    return
        except asyncio.CancelledError:
            raise
        except Exception as e:   # noqa: BLE001 - kept for the test to see (FakeKube.__exit__)
            self.errors.append(e)
        finally:
            self._running.pop(key, None)

    def _set_status(self, plural: str, namespace: str, obj: Json, status: Json) -> bool:
        """Write a new status if it differs (conditions compared without their times)."""
        old = obj.get("status") or {}
        def plain(s):
            return {k: v for k, v in s.items() if k not in ("conditions", "lastUpdateTime")}
        if plain(old) == plain(status) and same_conditions(old.get("conditions"),
                                                           status.get("conditions") or []):
            return False
        status["lastUpdateTime"] = now()
        for new in status.get("conditions") or []:
            for was in old.get("conditions") or []:
                if was["type"] == new["type"] and was["status"] == new["status"]:
                    new["lastTransitionTime"] = was["lastTransitionTime"]
        obj["status"] = status
        self._write(plural, namespace, obj)
        return True

    @staticmethod
    def _owner(obj: Json) -> Json:
        return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
                "controller": True, "blockOwnerDeletion": True}

    def _missing_secrets(self, namespace: str, pod: Json) -> list[str]:
        """The Secrets a pod's containers need (env, envFrom, volumes) that do not exist."""
        spec = pod.get("spec") or {}
        names = set()
        for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref and not ref.get("optional"):
                    names.add(ref.get("name", ""))
            for source in container.get("envFrom") or []:
                ref = source.get("secretRef")
                if ref and not ref.get("optional"):
                    names.add(ref.get("name", ""))
        for volume in spec.get("volumes") or []:
            ref = volume.get("secret")
            if ref and not ref.get("optional"):
                names.add(ref.get("secretName", ""))
        names.update(pod["metadata"].get("annotations", {}).get("fake.kube/needs-secrets", "")
                     .split())
        return sorted(n for n in names if n and self._get("secrets", namespace, n) is None)

    def _step_pod(self, namespace: str, pod: Json) -> bool:
        """The kubelet: a Pending pod runs, unless a Secret it needs is missing."""
        status = pod.get("status") or {}
        if status.get("phase") != "Pending":
            return False
        containers = (pod.get("spec") or {}).get("containers") or []
        missing = self._missing_secrets(namespace, pod)
        if missing:
            waiting = {"reason": "CreateContainerConfigError",
                       "message": f'secret "{missing[0]}" not found'}
            new = dict(status, phase="Pending", conditions=[
                condition("PodScheduled", True, ""),
                condition("Ready", False, "ContainersNotReady", "containers with unready status")],
                containerStatuses=[{"name": c.get("name", ""), "ready": False, "restartCount": 0,
                                    "image": c.get("image", ""), "imageID": "",
                                    "state": {"waiting": waiting}} for c in containers])
            self._set_status("pods", namespace, pod, new)
            return False
        ip = f"10.244.0.{self._ips['pod']}"
        self._ips["pod"] += 1
        new = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "10.0.0.1",
               "startTime": now(), "qosClass": status.get("qosClass", "BestEffort"),
               "conditions": [condition("PodScheduled", True, ""),
                              condition("Initialized", True, ""),
                              condition("ContainersReady", True, ""),
                              condition("Ready", True, "")],
               "containerStatuses": [{"name": c.get("name", ""), "ready": True, "started": True,
                                      "restartCount": 0, "image": c.get("image", ""),
                                      "imageID": "sha256:fake",
                                      "state": {"running": {"startedAt": now()}}}
                                     for c in containers]}
        self._set_status("pods", namespace, pod, new)
        return False

    def _cluster_pod(self, namespace: str, cluster: Json, template: Json, group: str,
                     node_type: str) -> None:
        name = cluster["metadata"]["name"]
        pod_name = (f"{name}-head-{suffix()}" if node_type == "head"
                    else f"{name}-{group}-worker-{suffix()}")
        spec = copy.deepcopy(template.get("spec") or {})
        meta = copy.deepcopy(template.get("metadata") or {})
        labels = dict(meta.get("labels") or {})
        labels.update({"ray.io/cluster": name, "ray.io/node-type": node_type,
                       "ray.io/group": group, "ray.io/identifier": f"{name}-{node_type}",
                       "ray.io/is-ray-node": "yes", "app.kubernetes.io/name": "kuberay",
                       "app.kubernetes.io/created-by": "kuberay-operator"})
        annotations = dict(meta.get("annotations") or {})
        auth = (cluster.get("spec") or {}).get("authOptions") or {}
        if auth.get("mode") == "token" and auth.get("secretName"):
            # KubeRay mounts the token's Secret into every Ray container
            annotations["fake.kube/needs-secrets"] = auth["secretName"]
        self._create("pods", namespace, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "labels": labels, "annotations": annotations,
                         "ownerReferences": [self._owner(cluster)]},
            "spec": spec})

    def _head_ports(self, cluster: Json) -> dict[str, int]:
        head = ((cluster.get("spec") or {}).get("headGroupSpec") or {}).get("template") or {}
        containers = (head.get("spec") or {}).get("containers") or [{}]
        declared = {p["name"]: int(p["containerPort"]) for p in containers[0].get("ports") or []
                    if p.get("name") and p.get("containerPort")}
        return declared or dict(DEFAULT_HEAD_PORTS)

    def _step_cluster(self, namespace: str, cluster: Json) -> bool:
        """KubeRay's RayCluster controller: the head Service and the pods the spec asks for
        (created Pending; the kubelet runs them), then status: `ready` once the head pod runs."""
        name = cluster["metadata"]["name"]
        spec = cluster.get("spec") or {}
        generation = cluster["metadata"].get("generation", 1)
        suspended = bool(spec.get("suspend"))
        pods = [p for (ns, _), p in self._store["pods"].items()
                if ns == namespace and (p["metadata"].get("labels") or {}).get("ray.io/cluster")
                == name and "deletionTimestamp" not in p["metadata"]]
        ports = self._head_ports(cluster)
        service = f"{name}-head-svc"
        if self._get("services", namespace, service) is None and not suspended:
            self._create("services", namespace, {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": service, "labels": {"ray.io/cluster": name,
                                                         "ray.io/node-type": "head"},
                             "ownerReferences": [self._owner(cluster)]},
                "spec": {"selector": {"ray.io/cluster": name, "ray.io/node-type": "head"},
                         "ports": [{"name": n, "port": p, "targetPort": p, "protocol": "TCP"}
                                   for n, p in ports.items()]}})
        # the pods: one head, and each worker group's replicas (times its hosts)
        groups = {"headgroup": (0 if suspended else 1, "head",
                                (spec.get("headGroupSpec") or {}).get("template") or {})}
        desired = minimum = maximum = 0
        for group in spec.get("workerGroupSpecs") or []:
            hosts = int(group.get("numOfHosts") or 1)
            low, high = int(group.get("minReplicas") or 0), int(group.get("maxReplicas") or 2**31 - 1)
            replicas = max(low, min(high, int(group.get("replicas", low) or 0)))
            if suspended or group.get("suspend"):
                replicas = 0
            desired, minimum = desired + replicas * hosts, minimum + low * hosts
            maximum = min(2**31 - 1, maximum + high * hosts)
            groups[group.get("groupName", "")] = (replicas * hosts, "worker", group.get("template") or {})
        for group, (count, node_type, template) in groups.items():
            have = [p for p in pods if p["metadata"]["labels"].get("ray.io/group") == group]
            for _ in range(count - len(have)):
                self._cluster_pod(namespace, cluster, template, group, node_type)
            for extra in have[count:] if count < len(have) else []:
                self._delete("pods", namespace, extra["metadata"]["name"])
        cluster = self._get("rayclusters", namespace, name) or cluster
        cluster = copy.deepcopy(cluster)
        # status, from the pods as they are now (and those going, while they run: pod_grace)
        pods = [p for (ns, _), p in self._store["pods"].items()
                if ns == namespace and (p["metadata"].get("labels") or {}).get("ray.io/cluster")
                == name and ("deletionTimestamp" not in p["metadata"] or self.pod_grace)]
        head = next((p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head"),
                    None)
        workers_ready = sum(1 for p in pods if p["metadata"]["labels"].get("ray.io/node-type")
                            == "worker" and p["status"].get("phase") == "Running")
        old = cluster.get("status") or {}
        status: Json = {"desiredWorkerReplicas": desired, "minWorkerReplicas": minimum,
                        "maxWorkerReplicas": maximum, "readyWorkerReplicas": workers_ready,
                        "availableWorkerReplicas": workers_ready, "observedGeneration": generation}
        for key in ("state", "stateTransitionTimes", "head", "endpoints", "reason"):
            if key in old:
                status[key] = copy.deepcopy(old[key])
        head_running = head is not None and head["status"].get("phase") == "Running"
        svc = self._get("services", namespace, service)
        if head_running and svc is not None:
            assert head is not None
            status["head"] = {"podIP": head["status"]["podIP"], "podName": head["metadata"]["name"],
                              "serviceIP": svc["spec"].get("clusterIP", ""),
                              "serviceName": service}
            status["endpoints"] = {n: str(p) for n, p in ports.items()}
            status["conditions"] = [
                condition("HeadPodReady", True, "HeadPodRunningAndReady", "", generation),
                condition("RayClusterProvisioned", True, "AllPodRunningAndReadyFirstTime",
                          "All Ray Pods are ready for the first time", generation)]
            if status.get("state") != "ready":
                status["state"] = "ready"
                status.setdefault("stateTransitionTimes", {})["ready"] = now()
            status.pop("reason", None)
        else:
            reason, message = "HeadPodNotFound", "Head Pod not found"
            if suspended:
                reason, message = "Suspended", "the cluster is suspended"
                status["state"] = "suspended"
            elif head is not None:
                waiting = [c["state"]["waiting"] for c in head["status"].get("containerStatuses")
                           or [] if "waiting" in c.get("state", {})]
                reason, message = ((waiting[0]["reason"], waiting[0]["message"]) if waiting
                                   else ("ContainersNotReady", "the head pod is not ready yet"))
            if "state" in status and status["state"] != "suspended" and not old.get("head"):
                status.pop("state")
            provisioned = any(c["type"] == "RayClusterProvisioned" and c["status"] == "True"
                              for c in old.get("conditions") or [])
            status["conditions"] = [
                condition("HeadPodReady", False, reason, message, generation),
                condition("RayClusterProvisioned", provisioned,
                          "AllPodRunningAndReadyFirstTime" if provisioned
                          else "RayClusterPodsProvisioning", "", generation)]
            if reason not in ("HeadPodNotFound", "ContainersNotReady"):
                status["reason"] = message
        self._set_status("rayclusters", namespace, cluster, status)
        return False

    def _new_cluster(self, namespace: str, owner: Json, name: str, spec: Json,
                     labels: dict[str, str]) -> Json:
        return self._create("rayclusters", namespace, {
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "labels": labels,
                         "ownerReferences": [self._owner(owner)]},
            "spec": copy.deepcopy(spec)})

    def _outcome(self, namespace: str, name: str) -> str:
        if (namespace, name) in self._outcomes:
            return self._outcomes[(namespace, name)]
        return self.job_outcome(name) if self.job_outcome else "SUCCEEDED"

    def _step_job(self, namespace: str, job: Json) -> bool:
        """KubeRay's RayJob controller: "" -> Initializing (its RayCluster) -> Running (PENDING,
        then RUNNING) -> Complete/SUCCEEDED or Failed/FAILED, then its deletion rules."""
        name = job["metadata"]["name"]
        spec = job.get("spec") or {}
        status = copy.deepcopy(job.get("status") or {})
        phase = status.get("jobDeploymentStatus", "")
        status["observedGeneration"] = job["metadata"].get("generation", 1)
        if phase == "":
            self._submitted[(namespace, name)] = {k: copy.deepcopy(v) for k, v in spec.items()
                                                  if k != "rayClusterSpec"}
            selector = spec.get("clusterSelector") or {}
            if selector:
                cluster_name = selector.get("ray.io/cluster", "")
            else:
                cluster_name = f"{name}-{suffix()}"
                self._new_cluster(namespace, job, cluster_name, spec.get("rayClusterSpec") or {},
                                  {"ray.io/originated-from-crd": "RayJob",
                                   "ray.io/originated-from-cr-name": name})
            ports = {}
            cluster = self._get("rayclusters", namespace, cluster_name)
            if cluster is not None:
                ports = self._head_ports(cluster)
            job_id = spec.get("jobId") or f"{name}-{suffix()}"
            status.update(jobDeploymentStatus="Initializing", rayClusterName=cluster_name,
                          jobId=job_id, startTime=now(),
                          dashboardURL=f"{cluster_name}-head-svc.{namespace}.svc.cluster.local:"
                                       f"{ports.get('dashboard', 8265)}")
            self._set_status("rayjobs", namespace, job, status)
            return bool(selector)
        cluster = self._get("rayclusters", namespace, status.get("rayClusterName", ""))
        if phase == "Initializing":
            if cluster is None or (cluster.get("status") or {}).get("state") != "ready":
                return bool(spec.get("clusterSelector"))   # a selected cluster is polled
            status.update(jobDeploymentStatus="Running", jobStatus="PENDING")
            self._set_status("rayjobs", namespace, job, status)
            return True
        if phase == "Running":
            if status.get("jobStatus") == "PENDING":
                status["jobStatus"] = "RUNNING"
                self._set_status("rayjobs", namespace, job, status)
                return True
            outcome = self._outcome(namespace, name)
            if outcome == "RUNNING":
                return False
            status.update(jobStatus=outcome, endTime=now(),
                          jobDeploymentStatus="Complete" if outcome == "SUCCEEDED" else "Failed")
            if outcome == "FAILED":
                status.update(reason="AppFailed", message="Job entrypoint command failed")
            self._set_status("rayjobs", namespace, job, status)
            return True
        if phase in ("Complete", "Failed") and job["metadata"]["uid"] not in self._finished:
            self._finished.add(job["metadata"]["uid"])
            self._plan_deletion(namespace, job)
        return False

    def _plan_deletion(self, namespace: str, job: Json) -> None:
        """What a finished RayJob deletes, and when: its deletionRules (each matching rule after
        its ttlSeconds), else onSuccess/onFailure or shutdownAfterJobFinishes after
        ttlSecondsAfterFinished. Seconds are scaled by seconds_scale."""
        spec, status = job.get("spec") or {}, job.get("status") or {}
        strategy = spec.get("deletionStrategy") or {}
        ttl = float(spec.get("ttlSecondsAfterFinished") or 0)
        plan: list[tuple[float, str]] = []
        if strategy.get("deletionRules"):
            for rule in strategy["deletionRules"]:
                cond = rule.get("condition") or {}
                if (cond.get("jobStatus") and cond["jobStatus"] == status.get("jobStatus")) or (
                        cond.get("jobDeploymentStatus")
                        and cond["jobDeploymentStatus"] == status.get("jobDeploymentStatus")):
                    plan.append((float(cond.get("ttlSeconds") or 0), rule["policy"]))
        elif strategy.get("onSuccess") or strategy.get("onFailure"):
            which = "onSuccess" if status.get("jobStatus") == "SUCCEEDED" else "onFailure"
            plan.append((ttl, (strategy.get(which) or {}).get("policy", "DeleteNone")))
        elif spec.get("shutdownAfterJobFinishes"):
            plan.append((ttl, "DeleteCluster"))
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        cluster_name = status.get("rayClusterName", "")
        for seconds, policy in sorted(plan):
            self._later(seconds * self.seconds_scale,
                        lambda p=policy: self._apply_policy(namespace, name, uid, cluster_name, p))

    def _apply_policy(self, namespace: str, name: str, uid: str, cluster_name: str,
                      policy: str) -> None:
        job = self._get("rayjobs", namespace, name)
        if job is None or job["metadata"]["uid"] != uid:
            return
        cluster = self._get("rayclusters", namespace, cluster_name)
        owned = cluster is not None and any(o.get("uid") == uid for o in
                                            cluster["metadata"].get("ownerReferences") or [])
        if policy == "DeleteSelf":
            self._delete("rayjobs", namespace, name)
        elif policy == "DeleteCluster" and owned:
            self._delete("rayclusters", namespace, cluster_name)
        elif policy == "DeleteWorkers" and owned and cluster is not None:
            cluster = copy.deepcopy(cluster)
            for group in (cluster.get("spec") or {}).get("workerGroupSpecs") or []:
                group["suspend"] = True
            self._write("rayclusters", namespace, cluster)
            self._kick("rayclusters", namespace, cluster_name)

    def _step_service(self, namespace: str, service: Json) -> bool:
        """KubeRay's RayService controller: its RayCluster, then (once the cluster is ready)
        the applications of serveConfigV2 RUNNING, Ready True and serviceStatus Running. A new
        rayClusterConfig gets a new cluster, which replaces the old one once ready."""
        name = service["metadata"]["name"]
        spec = service.get("spec") or {}
        generation = service["metadata"].get("generation", 1)
        status = copy.deepcopy(service.get("status") or {})
        active = status.get("activeServiceStatus") or {}
        pending = status.get("pendingServiceStatus") or {}
        config = spec.get("rayClusterConfig") or {}

        def cluster_of(which: Json) -> Json | None:
            return self._get("rayclusters", namespace, which.get("rayClusterName", ""))

        current = cluster_of(active)
        if current is not None and current.get("spec") != config and not cluster_of(pending):
            pending = {}
        if (current is None or current.get("spec") != config) and cluster_of(pending) is None:
            cluster_name = f"{name}-raycluster-{suffix()}"
            self._new_cluster(namespace, service, cluster_name, config,
                              {"ray.io/originated-from-crd": "RayService",
                               "ray.io/originated-from-cr-name": name})
            pending = {"rayClusterName": cluster_name}
        candidate = cluster_of(pending)
        if candidate is not None and (candidate.get("status") or {}).get("state") == "ready":
            old = current
            active, pending = {"rayClusterName": candidate["metadata"]["name"]}, {}
            current = candidate
            if old is not None and old["metadata"]["name"] != candidate["metadata"]["name"]:
                self._delete("rayclusters", namespace, old["metadata"]["name"])
        ready = current is not None and (current.get("status") or {}).get("state") == "ready"
        if ready:
            assert current is not None
            try:
                serve = yaml.safe_load(spec.get("serveConfigV2") or "") or {}
            except yaml.YAMLError:
                serve = {}
            apps = [a.get("name", "default") for a in serve.get("applications") or []
                    if isinstance(a, dict)]
            known = active.get("applicationStatuses") or {}
            active["applicationStatuses"] = {
                app: known.get(app) or {"status": "RUNNING", "healthLastUpdateTime": now(),
                                        "serveDeploymentStatuses": {}} for app in apps}
            for svc_name in (f"{name}-head-svc", f"{name}-serve-svc"):
                if self._get("services", namespace, svc_name) is None:
                    self._create("services", namespace, {
                        "apiVersion": "v1", "kind": "Service",
                        "metadata": {"name": svc_name, "labels": {"ray.io/serve": name},
                                     "ownerReferences": [self._owner(service)]},
                        "spec": {"selector": {"ray.io/cluster": current["metadata"]["name"],
                                              "ray.io/node-type": "head"},
                                 "ports": [{"name": "serve", "port": 8000}]}})
        status.update(activeServiceStatus=active, pendingServiceStatus=pending,
                      observedGeneration=generation, serviceStatus="Running" if ready else "",
                      numServeEndpoints=1 if ready else 0)
        status["conditions"] = [
            condition("Ready", ready, "NonZeroServeEndpoints" if ready else "Initializing",
                      "" if ready else "waiting for the RayCluster", generation),
            condition("UpgradeInProgress", bool(pending) and ready, "NoPendingCluster"
                      if not pending else "PendingClusterExists", "", generation)]
        self._set_status("rayservices", namespace, service, status)
        return False


@pytest.fixture
def fake_kube():
    """A FakeKube for one test, with a fast operator (20 ms a step).

        from tests.kube_api import fake_kube   # noqa: F401 - a fixture
    """
    with FakeKube(step=0.02, delete_delay=0.02) as fake:
        yield fake


def close_client(client) -> None:
    """Close a kubernetes ApiClient for good. ApiClient.close() ends its thread pool only, and
    urllib3 2's PoolManager.clear() drops its pools without closing them: each pool is closed
    here, or its connections stay open."""
    client.close()
    pools = client.rest_client.pool_manager.pools
    for key in list(pools.keys()):
        pools[key].close()
    client.rest_client.pool_manager.clear()


def free_port() -> int:
    """A port nothing listens on now (for a test's own listener)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]
