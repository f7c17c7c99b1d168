"""The `kuberay` launch backend: a RayCluster applied through the Kubernetes API, which KubeRay's
operator turns into pods; the head reached through a port-forward.

    up      the token's Secret (created or replaced), then the RayCluster (created, or replaced
            at the version read); a restart deletes the pods, which KubeRay makes again from
            the new template; then wait for the operator's `ready` and the workers' minimum
    down    delete the RayCluster and the Secret; wait until the RayCluster is gone
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
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, cast

from ..errors import ClusterError
from ..providers import kuberay as provider_module
from ..render import kuberay
from ..state import ClusterRecord, State, cluster_key
from ..util.progress import Progress

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
POLL_S = 0.5
SHUT_S = 5.0   # for a port-forward's proxy thread to end, once its socket is closed
Config = dict[str, Any]


class KubeRay:
    NAME = "kuberay"
    FORWARD = "a port-forward to the head pod"
    VIA = "port-forward"
    SHELL_ON_HEAD = False

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

        client = provider_module.api_client(config["provider"])
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
            self._put_secret(core, name, namespace)
            existed = self._apply(custom, manifest, name, namespace)
            if restart and existed:
                deleted = self._delete_pods(core, name, namespace)
                self._log_line(name, f"restart: deleted {deleted} pods of RayCluster {name}; "
                                     "KubeRay makes them again from the new template")
            self._wait_ready(custom, name, namespace, manifest, timeout)

    def _put_secret(self, core: Any, name: str, namespace: str) -> None:
        from kubernetes.client.exceptions import ApiException

        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": kuberay.secret_name(name), "namespace": namespace,
                             "labels": kuberay.labels(name)},
                "stringData": {kuberay.TOKEN_KEY: self.state.secrets.read(cluster_key(name))}}
        try:
            core.create_namespaced_secret(namespace, body)
            self._log_line(name, f"created Secret {namespace}/{kuberay.secret_name(name)}")
        except ApiException as exc:
            if exc.status != 409:
                raise
            core.replace_namespaced_secret(kuberay.secret_name(name), namespace, body)
            self._log_line(name, f"replaced Secret {namespace}/{kuberay.secret_name(name)}")

    def _apply(self, custom: Any, manifest: Config, name: str, namespace: str) -> bool:
        """Create the RayCluster, or replace the one there at the version read; whether it
        existed."""
        from kubernetes.client.exceptions import ApiException

        try:
            live = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest)
            self._log_line(name, f"created RayCluster {namespace}/{name}")
            return False
        if (live.get("metadata", {}).get("labels") or {}).get(kuberay.CLUSTER_LABEL) != name:
            raise ClusterError(f"a RayCluster {namespace}/{name} exists that orchestrate did "
                               "not create", hint="choose another cluster_name, or delete it "
                                                  "with kubectl if it is yours")
        body = dict(manifest, metadata={**manifest["metadata"],
                                        "resourceVersion": live["metadata"]["resourceVersion"]})
        custom.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body)
        self._log_line(name, f"replaced RayCluster {namespace}/{name}")
        return True

    def _delete_pods(self, core: Any, name: str, namespace: str) -> int:
        pods = core.list_namespaced_pod(namespace, label_selector=f"ray.io/cluster={name}")
        for pod in pods.items:
            core.delete_namespaced_pod(pod.metadata.name, namespace)
        return len(pods.items)

    def _wait_ready(self, custom: Any, name: str, namespace: str, manifest: Config,
                    timeout: float) -> None:
        """Until the operator has seen this generation and says `ready` with every worker
        group at its minimum."""
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
            if seen and state == "ready" and ready >= wanted:
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
            for what in ("RayCluster", "Secret"):
                try:
                    if what == "RayCluster":
                        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                               name)
                    else:
                        core.delete_namespaced_secret(secret, namespace)
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
                    if exc.status == 404:
                        return
                    raise
                if time.monotonic() >= deadline:
                    raise ClusterError(f"RayCluster {namespace}/{name} was still there "
                                       f"{timeout:.0f} s after it was deleted",
                                       hint="a finalizer may hold it: kubectl describe it")
                time.sleep(POLL_S)

    def log_path(self, name: str, action: str) -> Path:
        return self.state.store.workspace(name) / f"{action}.log"

    def command(self, action: str, *, in_place: bool = False) -> str:
        verb = {"up": "applying the RayCluster", "down": "deleting the RayCluster"}.get(
            action, action)
        return f"KubeRay ({verb} through the Kubernetes API" + \
            (", its pods kept)" if in_place else ")")

    # --- reaching a cluster that is up ---

    def forward(self, record: ClusterRecord, remote_port: int, *, timeout: float,
                local_port: int | None = None, remote_host: str = "127.0.0.1",
                watch: Any = None) -> AbstractContextManager[int]:
        return self._forward(record, remote_port, local_port)

    @contextmanager
    def _forward(self, record: ClusterRecord, remote_port: int,
                 local_port: int | None) -> Iterator[int]:
        from kubernetes.stream import portforward

        from ..util.relay import Relay

        config = self._config(record.name)
        namespace = str(config["provider"]["namespace"])
        with self._api(config) as (_, core):
            with _api_errors(f"cluster {record.name}"):
                pods = core.list_namespaced_pod(
                    namespace, label_selector=f"ray.io/cluster={record.name},ray.io/node-type=head")
            running = [p.metadata.name for p in pods.items
                       if (p.status is None or p.status.phase in (None, "Running"))]
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


def _condition_text(status: Config) -> str:
    false = [f"{c.get('type')}: {c.get('message') or c.get('reason')}"
             for c in status.get("conditions") or [] if c.get("status") == "False"]
    return "; ".join(false)


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
