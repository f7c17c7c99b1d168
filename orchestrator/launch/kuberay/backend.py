"""The `kuberay` launch backend: a RayCluster applied through the Kubernetes API, which KubeRay's
operator turns into pods; the head reached through a port-forward.

    up      the token's Secret (created or replaced), its NetworkPolicy (the same), then the
            RayCluster (created, or replaced at the version read); a restart deletes the pods,
            which KubeRay makes again from the new template; then wait for the operator's
            `ready` and the workers' minimum
    down    delete the RayCluster and the Secret; wait until the RayCluster is gone, then
            delete the NetworkPolicy
    forward a loopback port (util.relay) whose every connection is a port-forward stream to the
            head pod, as `kubectl port-forward` makes them

Everything goes through the official `kubernetes` client (the `kuberay` extra), built from the
kubeconfig and the file's `provider.context` (providers.kuberay.api_client). What each step did
goes to the cluster's log (`log_path`), never the token: it travels only in the Secret's body.
Hands-on access (attach, exec, rsync) is not built yet: each says so and names the kubectl
command that does it.
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
import socket
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, cast

from ...errors import ClusterError, MissingDependency, NotContacted
from ...providers import kuberay as provider_module
from ...state import ClusterRecord, State, cluster_key
from ...state.refs import fingerprint
from ...util.progress import Progress
from ..base import Feature
from . import manifests as kuberay

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
JOBS = "rayjobs"
POLL_S = 0.5
JOB_POLL_S = float(os.environ.get("ORCHESTRATE_RAYJOB_POLL_S", "2"))
# KubeRay's jobDeploymentStatus once nothing more will happen to the job
JOB_ENDED = ("Complete", "Failed", "ValidationFailed")
SHUT_S = 5.0   # for a port-forward's proxy thread to end, once its socket is closed
Config = dict[str, Any]
ENFORCED = "enforced only where the Kubernetes cluster's network plugin enforces NetworkPolicy"


class KubeRay:
    NAME = provider_module.LAUNCH
    FEATURES = frozenset({Feature.HEAD_THROUGH_API, Feature.RESOURCE, Feature.JOB_ON_OWN_CLUSTER,
                          Feature.SERVICE_RESOURCE})
    FORWARD = "a port-forward to the head pod"
    VIA = "port-forward"

    @staticmethod
    def teardown_words(name: str, config: Mapping[str, Any],
                       record: Mapping[str, Any]) -> list[str]:
        """No `ray down`, no ssh: the RayCluster, its Secret and NetworkPolicy deleted through
        the Kubernetes API of the recorded context."""
        provider = config.get("provider")
        provider = provider if isinstance(provider, Mapping) else {}
        namespace = provider.get("namespace")
        return [f"delete the RayCluster {namespace!r}/{name!r}, its token's Secret "
                f"{namespace!r}/{kuberay.secret_name(name)!r} and its NetworkPolicy through the "
                f"Kubernetes API, "
                + (f"kubeconfig context {provider['context']!r}" if provider.get("context")
                   else "the kubeconfig's current context")]

    def __init__(self, state: State, progress: Progress) -> None:
        self.state = state
        self.progress = progress

    # --- the API ---

    def _config(self, name: str, config_file: Path | None = None) -> Config:
        if config_file is not None:
            data = json.loads(config_file.read_text())
        else:
            data = self.state.store.read_rendered(name)
        if not isinstance(data, dict):
            raise ClusterError(f"cluster {name} has no rendered config here",
                               hint="run `orchestrate up` with its cluster file")
        return data

    @contextmanager
    def _api(self, config: Config) -> Iterator[tuple[Any, Any]]:
        """(CustomObjectsApi, CoreV1Api) for the cluster's API server."""
        from kubernetes.client import CoreV1Api, CustomObjectsApi

        try:
            client = provider_module.api_client(config["provider"])
        except MissingDependency:
            raise
        except Exception as exc:  # noqa: BLE001 - no kubeconfig, an unknown context, an auth plugin
            raise NotContacted(f"no Kubernetes client for {provider_module.kubeconfig_file()}: "
                               f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}",
                               hint="check KUBECONFIG and provider.context "
                                    "(`orchestrate check FILE`)") from None
        try:
            yield CustomObjectsApi(client), CoreV1Api(client)
        finally:
            provider_module.close(client)

    def _log_line(self, name: str, text: str, action: str = "up") -> None:
        path = self.log_path(name, action)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with open(fd, "a") as log:
            log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")

    # --- up and down ---

    def launch(self, name: str, provider: str, config_file: Path, *, restart: bool,
               timeout: float) -> None:
        config = self._config(name, config_file)
        manifest = kuberay.ray_cluster(config)
        namespace = manifest["metadata"]["namespace"]
        with self._api(config) as (custom, core), _api_errors(f"cluster {name}"):
            live = self._owned(custom, name, namespace)
            foreign = self._put_secret(core, name, namespace)
            policy = kuberay.network_policy(manifest)
            self._log_line(name, self._put_policy(core, policy, name))
            self.progress(f"  NetworkPolicy {namespace}/{policy['metadata']['name']}: the "
                          f"cluster's pods take connections from one another only ({ENFORCED})")
            existed = self._apply(custom, manifest, name, namespace, live)
            deleted: set[str] = set()
            if existed and (restart or foreign):
                deleted = self._delete_pods(core, name, namespace)
                self._log_line(name, f"restart: deleted {len(deleted)} pods of RayCluster "
                                     f"{name}; KubeRay makes them again from the new template"
                               + ("" if restart else " (so that none keeps the token that "
                                  "was in the Secret)"))
            self._wait_ready(custom, name, namespace, manifest, timeout, gone=deleted)

    def _put_secret(self, core: Any, name: str, namespace: str) -> bool:
        """Create the token's Secret, or replace the one `up` wrote before: whether that one
        held another token. Labels do not prove who wrote a Secret: one labelled as ours whose
        token is not this cluster's is replaced all the same (the token there is never used),
        and `launch` restarts pods that may have started with it."""
        secret = kuberay.secret_name(name)
        token = self.state.secrets.read(cluster_key(name))
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": secret, "namespace": namespace,
                             "labels": kuberay.labels(name)},
                "stringData": {kuberay.TOKEN_KEY: token}}
        there = _made_or_ours(lambda: core.create_namespaced_secret(namespace, body),
                              lambda: core.read_namespaced_secret(secret, namespace),
                              f"Secret {namespace}/{secret}", name,
                              hint="choose another cluster_name")
        if there is None:
            self._log_line(name, f"created Secret {namespace}/{secret}")
            return False
        foreign = _token_fingerprint(there) != fingerprint(token)
        core.replace_namespaced_secret(secret, namespace, body)
        self._log_line(name, f"replaced Secret {namespace}/{secret}" + (
            ": it held a token other than this cluster's" if foreign else ""))
        if foreign:
            self.progress(f"  Secret {namespace}/{secret} held a token other than this "
                          "cluster's: replaced, and the cluster's pods restarted if it runs")
        return foreign

    def _put_policy(self, core: Any, body: Config, cluster: str) -> str:
        """Create the NetworkPolicy, or replace the one orchestrate wrote for `cluster` (at the
        version read), and say which; one of that name without orchestrate's label is
        refused."""
        from kubernetes.client import NetworkingV1Api

        api = NetworkingV1Api(core.api_client)
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        there = _made_or_ours(lambda: api.create_namespaced_network_policy(namespace, body),
                              lambda: api.read_namespaced_network_policy(name, namespace),
                              f"NetworkPolicy {namespace}/{name}", cluster,
                              hint=f"check who made it (kubectl -n {namespace} get "
                                   f"networkpolicy {name} -o yaml) and delete it, or choose "
                                   "another name")
        if there is None:
            return f"created NetworkPolicy {namespace}/{name}"
        body = {**body, "metadata": {**body["metadata"],
                                     "resourceVersion": there.metadata.resource_version}}
        api.replace_namespaced_network_policy(name, namespace, body)
        return f"replaced NetworkPolicy {namespace}/{name}"

    def _owned(self, custom: Any, name: str, namespace: str) -> Config | None:
        """The RayCluster there (None: none), refused when orchestrate did not make it: its
        Secret is not written and it is never replaced or deleted."""
        from kubernetes.client.exceptions import ApiException

        try:
            live: Config = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                               name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return None
        if (live.get("metadata", {}).get("labels") or {}).get(kuberay.CLUSTER_LABEL) != name:
            raise ClusterError(f"a RayCluster {namespace}/{name} exists that orchestrate did "
                               "not create; it is left as it is",
                               hint="choose another cluster_name, or delete it with kubectl if "
                                    "it is yours")
        return live

    def _apply(self, custom: Any, manifest: Config, name: str, namespace: str,
               live: Config | None) -> bool:
        """Create the RayCluster, or replace the one there at the version read (read again
        when the operator or its autoscaler wrote in between); whether it existed."""
        from kubernetes.client.exceptions import ApiException

        if live is None:
            stored = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                            manifest)
            self._log_line(name, f"created RayCluster {namespace}/{name}")
            self._kept_auth(custom, stored, name, namespace)
            return False
        for attempt in range(REPLACE_ATTEMPTS):
            body = _replacing(manifest, live)
            try:
                stored = custom.replace_namespaced_custom_object(GROUP, VERSION, namespace,
                                                                 PLURAL, name, body)
                break
            except ApiException as exc:
                if exc.status != 409 or attempt == REPLACE_ATTEMPTS - 1:
                    raise
                live = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                           name)
        self._log_line(name, f"replaced RayCluster {namespace}/{name}")
        self._kept_auth(custom, stored, name, namespace)
        return True

    def _kept_auth(self, custom: Any, stored: Config, name: str, namespace: str) -> None:
        """An API server whose KubeRay predates authOptions (v1.5) drops them without a word:
        a cluster without token authentication is deleted at once, never left running."""
        if ((stored.get("spec") or {}).get("authOptions") or {}).get("mode") == "token":
            return
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        self._log_line(name, f"deleted RayCluster {namespace}/{name}: authOptions dropped")
        raise ClusterError(f"the API server dropped the RayCluster's authOptions (KubeRay "
                           f"before v1.5): {namespace}/{name} would have run without token "
                           "authentication, so it was deleted",
                           hint="upgrade KubeRay to v1.7.0 or newer")

    def _delete_pods(self, core: Any, name: str, namespace: str) -> set[str]:
        pods = core.list_namespaced_pod(namespace, label_selector=f"ray.io/cluster={name}")
        for pod in pods.items:
            core.delete_namespaced_pod(pod.metadata.name, namespace)
        return {pod.metadata.name for pod in pods.items}

    def _wait_ready(self, custom: Any, name: str, namespace: str, manifest: Config,
                    timeout: float, gone: Collection[str] = ()) -> None:
        """Until the operator has seen this generation and says `ready` with the workers'
        minimum ready, and after a restart, with a new head pod ready (KubeRay never clears
        `ready`, and counts pods that are going as ready while they still are)."""
        wanted = sum(int(g.get("minReplicas", 0)) for g in manifest["spec"]["workerGroupSpecs"])
        deadline = time.monotonic() + timeout
        said = ""
        while True:
            live = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            status = live.get("status") or {}
            seen = int(status.get("observedGeneration") or 0) >= \
                int(live["metadata"].get("generation") or 0)
            ready = int(status.get("readyWorkerReplicas") or 0)
            state = status.get("state") or "pending"
            now = f"  RayCluster {name}: {state}, {ready}/{wanted} workers ready"
            if now != said:
                self.progress(now)
                self._log_line(name, now.strip())
                said = now
            head = status.get("head") or {}
            renewed = not gone or (head.get("podName") not in gone and _condition(
                status, "HeadPodReady") is not False)
            if seen and state == "ready" and ready >= wanted and renewed:
                return
            if time.monotonic() >= deadline:
                reason = status.get("reason") or _condition_text(status)
                raise ClusterError(
                    f"RayCluster {namespace}/{name} was not ready within {timeout:.0f} s "
                    f"(state: {state}{'; ' + reason if reason else ''})",
                    hint=f"kubectl -n {namespace} describe raycluster {name}, and its pods' "
                         "events, say why")
            time.sleep(POLL_S)

    def head_address(self, name: str, provider: str, config_file: Path) -> str:
        """The head pod's address (reached from here only through a port-forward)."""
        config = self._config(name, config_file)
        namespace = str(config["provider"]["namespace"])
        with self._api(config) as (custom, _), _api_errors(f"cluster {name}"):
            live = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        head = (live.get("status") or {}).get("head") or {}
        address = head.get("podIP") or head.get("serviceIP")
        if not address:
            raise ClusterError(f"RayCluster {namespace}/{name} is ready but names no head "
                               "address")
        return str(address)

    def teardown(self, name: str, provider: str, config_file: Path, *, timeout: float) -> None:
        from kubernetes.client.exceptions import ApiException

        config = self._config(name, config_file)
        namespace = str(config["provider"]["namespace"])
        with self._api(config) as (custom, core), _api_errors(f"cluster {name}"):
            secret = kuberay.secret_name(name)
            self._owned(custom, name, namespace)   # another's RayCluster: refused, not deleted
            for what in ("RayCluster", "Secret"):
                try:
                    if what == "RayCluster":
                        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                               name)
                    elif (core.read_namespaced_secret(secret, namespace).metadata.labels or {}) \
                            .get(kuberay.CLUSTER_LABEL) == name:   # only the one `up` wrote
                        core.delete_namespaced_secret(secret, namespace)
                    else:
                        continue
                    self._log_line(name, f"deleted {what} {namespace}/"
                                         f"{name if what == 'RayCluster' else secret}", "down")
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            deadline = time.monotonic() + timeout
            while True:
                try:
                    custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    break
                if time.monotonic() >= deadline:
                    raise ClusterError(f"RayCluster {namespace}/{name} was still there "
                                       f"{timeout:.0f} s after it was deleted",
                                       hint="a finalizer may hold it: kubectl describe it")
                time.sleep(POLL_S)
            self._delete_policy(core, name, namespace)   # its pods kept it until they went

    def _delete_policy(self, core: Any, name: str, namespace: str) -> None:
        """Delete the cluster's NetworkPolicy, only the one `up` wrote."""
        from kubernetes.client import NetworkingV1Api
        from kubernetes.client.exceptions import ApiException

        api = NetworkingV1Api(core.api_client)
        policy = kuberay.policy_name(name)
        try:
            there = api.read_namespaced_network_policy(policy, namespace)
            if (there.metadata.labels or {}).get(kuberay.CLUSTER_LABEL) == name:
                api.delete_namespaced_network_policy(policy, namespace)
                self._log_line(name, f"deleted NetworkPolicy {namespace}/{policy}", "down")
        except ApiException as exc:
            if exc.status != 404:
                raise

    def log_path(self, name: str, action: str) -> Path:
        return self.state.store.workspace(name) / f"{action}.log"

    def command(self, action: str, *, in_place: bool = False) -> str:
        verb = {"up": "applying the RayCluster", "down": "deleting the RayCluster"}.get(
            action, action)
        return f"KubeRay ({verb} through the Kubernetes API" + \
            (", its pods kept)" if in_place else ")")

    # --- a run on a cluster of its own: a RayJob ---

    def submit_job(self, cluster: str, config: Config, manifest: Config) -> tuple[bool, Config]:
        """The RayJob, its NetworkPolicy, then its own token Secret, both owned by it (they go
        with the RayJob; its cluster's pods wait for the Secret, as kubelet retries a missing
        one): (whether the RayJob was made now, the RayJob as the server has it). The token is
        the cluster file's. A Secret of that name which this RayJob does not own, or which
        holds another token, is refused: its cluster would run with a token someone else
        chose. The RayJob made now is then deleted, so nothing runs."""
        namespace = manifest["metadata"]["namespace"]
        name = manifest["metadata"]["name"]
        secret = manifest["spec"]["rayClusterSpec"]["authOptions"]["secretName"]
        token = self.state.secrets.read(cluster_key(cluster))
        with self._api(config) as (custom, core), _api_errors(f"RayJob {name}"):
            stored = _found(lambda: custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, JOBS, name))
            there = _found(lambda: core.read_namespaced_secret(secret, namespace))
            if there is not None:   # checked before a RayJob that would mount it is made
                _check_job_secret(there, stored, token, namespace, created=False)
            created = False
            if stored is None:
                stored, created = self._create_job(custom, manifest)
            try:
                self._own_parts(core, cluster, manifest, stored, token, there is None,
                                created)
            except ClusterError:
                if created:
                    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, JOBS,
                                                           name)
                raise
        self.progress(f"  NetworkPolicy {namespace}/{kuberay.policy_name(name)}: the RayJob's "
                      "pods take connections from one another, and its dashboard from its "
                      f"submitter and KubeRay's operator, only ({ENFORCED})")
        return created, stored

    def _create_job(self, custom: Any, manifest: Config) -> tuple[Config, bool]:
        from kubernetes.client.exceptions import ApiException

        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        try:
            return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, JOBS,
                                                          manifest), True
        except ApiException as exc:
            if exc.status != 409:   # made meanwhile: the same submission's
                raise
        return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, JOBS, name), False

    def _own_parts(self, core: Any, cluster: str, manifest: Config, stored: Config, token: str,
                   missing: bool, created: bool) -> None:
        """The RayJob's NetworkPolicy, and its Secret when none was there (one made in
        between is checked as one found before)."""
        from kubernetes.client.exceptions import ApiException

        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RayJob", "name": name,
                 "uid": stored["metadata"]["uid"]}
        policy = kuberay.job_network_policy(manifest)
        policy["metadata"]["ownerReferences"] = [owner]
        self._put_policy(core, policy, cluster)
        if not missing:
            return
        secret = manifest["spec"]["rayClusterSpec"]["authOptions"]["secretName"]
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": secret, "namespace": namespace,
                             "labels": kuberay.labels(cluster), "ownerReferences": [owner]},
                "stringData": {kuberay.TOKEN_KEY: token}}
        try:
            core.create_namespaced_secret(namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            _check_job_secret(core.read_namespaced_secret(secret, namespace), stored, token,
                              namespace, created=created)

    def follow_job(self, config: Config, name: str, *, timeout: float | None = None) -> Config:
        """The RayJob's status once its job ended (SUCCEEDED, FAILED, STOPPED) or its
        deployment failed; each new state said once."""
        namespace = str(config["provider"]["namespace"])
        deadline = None if timeout is None else time.monotonic() + timeout
        said = ""
        with self._api(config) as (custom, _), _api_errors(f"RayJob {name}"):
            while True:
                status = custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, JOBS, name).get("status") or {}
                deployment = status.get("jobDeploymentStatus") or "New"
                job = status.get("jobStatus") or ""
                now = f"  RayJob {name}: {deployment}" + (f" ({job})" if job else "")
                if now != said:
                    self.progress(now)
                    said = now
                if deployment in JOB_ENDED or job in ("SUCCEEDED", "FAILED", "STOPPED"):
                    return dict(status)
                if deadline is not None and time.monotonic() >= deadline:
                    raise ClusterError(f"RayJob {namespace}/{name} did not end within "
                                       f"{timeout:.0f} s")
                time.sleep(JOB_POLL_S)

    # --- reaching a cluster that is up ---

    def forward(self, record: ClusterRecord, remote_port: int, *, timeout: float,
                local_port: int | None = None, remote_host: str = "127.0.0.1",
                watch: Any = None) -> AbstractContextManager[int]:
        return self._forward(record, remote_port, local_port)

    @contextmanager
    def _forward(self, record: ClusterRecord, remote_port: int,
                 local_port: int | None) -> Iterator[int]:
        from kubernetes.stream import portforward

        from ...util.relay import Relay

        config = self._config(record.name)
        namespace = str(config["provider"]["namespace"])
        with self._api(config) as (_, core):
            with _api_errors(f"cluster {record.name}"):
                pods = core.list_namespaced_pod(
                    namespace, label_selector=f"ray.io/cluster={record.name},ray.io/node-type=head")
            running = [p.metadata.name for p in pods.items
                       if (p.status is None or p.status.phase in (None, "Running"))
                       and p.metadata.deletion_timestamp is None]   # a going one answers no more
            if not running:
                raise ClusterError(f"cluster {record.name} has no head pod running in "
                                   f"{namespace}", hint="`orchestrate status` says more")
            head = running[0]
            streams: list[Any] = []

            def connect() -> socket.socket:
                try:
                    stream = portforward(core.connect_get_namespaced_pod_portforward, head,
                                         namespace, ports=str(remote_port))
                except Exception as exc:  # noqa: BLE001 - websocket and API errors alike
                    raise OSError(str(exc)) from None
                streams.append(stream)
                # its socket pair's end, which the stream's own thread pumps
                return cast(socket.socket, stream.socket(remote_port))

            try:
                relay = Relay(connect, port=local_port or 0)
            except OSError as exc:
                raise ClusterError(f"port {local_port} on 127.0.0.1 is taken ({exc.strerror})",
                                   hint="choose another port") from None
            try:
                with relay.start():
                    yield relay.port
            finally:
                for stream in streams:   # the client's thread leaves a websocket the server
                    _shut(stream)        # closed first open until garbage collection

    def attach(self, record: ClusterRecord, options: list[str]) -> int:
        raise self._by_hand(record, "a shell on the head", "exec -it {pod} -- bash")

    def exec(self, record: ClusterRecord, command: str, *, tty: bool | None = None,
             in_container: bool = True) -> int:
        raise self._by_hand(record, "commands on the head", "exec {pod} -- COMMAND")

    def output(self, record: ClusterRecord, command: str, *, timeout: float) -> str:
        raise self._by_hand(record, "commands on the head", "exec {pod} -- COMMAND")

    def rsync(self, record: ClusterRecord, *, down: bool, source: str, target: str,
              all_nodes: bool = False) -> None:
        raise self._by_hand(record, "copying files", "cp")

    def _by_hand(self, record: ClusterRecord, what: str, kubectl: str) -> ClusterError:
        try:
            namespace = str(self._config(record.name)["provider"]["namespace"])
        except ClusterError:
            namespace = "NAMESPACE"
        pod = f"$(kubectl -n {namespace} get pod -l ray.io/cluster={record.name}," \
              "ray.io/node-type=head -o name)"
        return ClusterError(f"{what} is not built for KubeRay clusters yet",
                            hint=f"kubectl -n {namespace} {kubectl.format(pod=pod)}")


REPLACE_ATTEMPTS = 5


def _replacing(manifest: Config, live: Config) -> Config:
    """The new RayCluster as a replacement of `live`: at its version, with the annotations and
    finalizers other tools put there, and where the autoscaler scales a group, the replicas it
    runs now (KubeRay's autoscaler owns them)."""
    meta = live.get("metadata") or {}
    body = copy.deepcopy(manifest)
    body["metadata"] = {**body["metadata"], "resourceVersion": meta["resourceVersion"],
                        **{k: meta[k] for k in ("annotations", "finalizers") if meta.get(k)}}
    if body["spec"].get("enableInTreeAutoscaling"):
        running = {g.get("groupName"): g.get("replicas")
                   for g in (live.get("spec") or {}).get("workerGroupSpecs") or []}
        for group in body["spec"]["workerGroupSpecs"]:
            now = running.get(group["groupName"])
            if isinstance(now, int):
                group["replicas"] = min(max(now, group["minReplicas"]), group["maxReplicas"])
    return body


def _shut(stream: Any) -> None:
    """Close a port-forward stream: our end of its socket pair, upon which the client's proxy
    thread closes the websocket and ends; then the websocket, which that thread leaves open
    when the server closed first. Not before the thread has ended: shut under its `select`, the
    thread dies of a bad file descriptor."""
    with contextlib.suppress(OSError):
        stream.close()
    for thread in threading.enumerate():   # the stream's proxy (kubernetes.stream.ws_client)
        if getattr(getattr(thread, "_target", None), "__self__", None) is stream:
            thread.join(SHUT_S)
            if thread.is_alive():
                return
    try:
        stream.websocket.shutdown()
    except Exception:  # noqa: BLE001, S110 - closing what may be closed already
        pass


def _condition(status: Config, kind: str) -> bool | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind:
            return bool(condition.get("status") == "True")
    return None


def _condition_text(status: Config) -> str:
    false = [f"{c.get('type')}: {c.get('message') or c.get('reason')}"
             for c in status.get("conditions") or [] if c.get("status") == "False"]
    return "; ".join(false)


def _made_or_ours(create: Any, read: Any, what: str, cluster: str, *, hint: str) -> Any:
    """create(), None when that made the object; else the one there (read()), refused unless
    orchestrate's label names `cluster` (it is then left as it is)."""
    from kubernetes.client.exceptions import ApiException

    try:
        create()
        return None
    except ApiException as exc:
        if exc.status != 409:
            raise
    there = read()
    if (there.metadata.labels or {}).get(kuberay.CLUSTER_LABEL) != cluster:
        raise ClusterError(f"a {what} exists that orchestrate did not create; it is left as "
                           "it is", hint=hint)
    return there


def _found(read: Any) -> Any:
    """What read() returns, None when the API answers 404."""
    from kubernetes.client.exceptions import ApiException

    try:
        return read()
    except ApiException as exc:
        if exc.status != 404:
            raise
        return None


def _token_fingerprint(secret: Any) -> str | None:
    """The fingerprint of the token in a Secret read through the client (None: it has none)."""
    import base64
    import binascii

    value = (secret.data or {}).get(kuberay.TOKEN_KEY)
    try:
        return fingerprint(base64.b64decode(value, validate=True).decode()) if value else None
    except (binascii.Error, UnicodeDecodeError):
        return None


def _check_job_secret(there: Any, job: Config | None, token: str, namespace: str, *,
                      created: bool) -> None:
    """A RayJob's token Secret found there is used only when that RayJob owns it (its uid) and
    it holds the cluster file's token; else ClusterError, naming it."""
    secret = there.metadata.name
    uid = (job or {}).get("metadata", {}).get("uid")
    owners = [o.uid for o in there.metadata.owner_references or []
              if o.kind == "RayJob" and o.api_version == f"{GROUP}/{VERSION}"]
    if job is None:
        why = "before its RayJob, so it is not one orchestrate wrote"
    elif uid not in owners:
        why = f"which the RayJob {job['metadata']['name']} does not own"
    elif _token_fingerprint(there) != fingerprint(token):
        why = "holding a token other than the cluster file's"
    else:
        return
    rayjob = "" if job is None else job["metadata"]["name"]
    then = "the RayJob made now was deleted" if created else (
        "nothing was submitted" if job is None else
        f"its RayJob {rayjob} may run with it: delete it too (kubectl -n {namespace} delete "
        f"rayjob {rayjob})")
    raise ClusterError(f"a Secret {namespace}/{secret} exists, {why}: the RayJob's cluster "
                       f"would run with a token someone else chose; {then}",
                       hint=f"check who made it (kubectl -n {namespace} get secret {secret} "
                            "-o yaml: its ownerReferences and managedFields), delete it, and "
                            "run again")


@contextmanager
def _api_errors(what: str) -> Iterator[None]:
    """The client's errors as one line each, never a traceback; the body's `message` (a
    Kubernetes Status) when there is one."""
    from kubernetes.client.exceptions import ApiException

    try:
        yield
    except ApiException as exc:
        message = exc.reason or ""
        try:
            message = json.loads(exc.body or "{}").get("message") or message
        except (ValueError, AttributeError):
            pass
        raise ClusterError(f"{what}: the Kubernetes API answered {exc.status}: {message}",
                           hint="check the kubeconfig's credentials, the namespace, and that "
                                "KubeRay is installed (`orchestrate check`)") from None
    except ClusterError:
        raise
    except Exception as exc:  # noqa: BLE001 - urllib3's, the kubeconfig's: one line each
        raise ClusterError(f"{what}: the Kubernetes API could not be reached: "
                           f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}",
                           hint="check the kubeconfig's server and your network") from None
