"""`orchestrate serve` / `unserve` / `serve --status`: a Serve application per service file,
through the dashboard's Serve REST API (`clients.serve.ServeClient`, on the Endpoint
`reach.target.open_target` gives: the service's cluster, or the embedded Ray).

    deploy(spec, state, progress) -> Served
        checkpoint (resolved here) -> token (0600, only its hash goes to the cluster)
        -> with `demo: true`, the demo page's own secret (0600, its hash likewise)
        -> orchestrate's package uploaded (Serve's REST API takes only remote URIs)
        -> GET the running applications -> refuse a route another one serves
        -> no-op if ours is RUNNING with the same config, else PUT all of them with ours
        -> wait for RUNNING (DEPLOY_FAILED: the replica's error) -> probe /healthz
    remove(name, state) / status(names, state)

The PUT is declarative over every application: the ones this file did not create are sent back
exactly as Serve reports them, so they keep running.
"""
from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .. import launch
from ..clients.serve import PortTaken, ServeClient, routes, running_configs
from ..errors import OrchestrateError, Problem, ServeError, SpecError
from ..language.service import ServiceSpec, load_service
from ..reach import embedded
from ..reach.target import embedded_endpoint, open_target, recorded_cluster
from ..render import service as render
from ..run.experiment import latest_run
from ..state import ClusterRecord, State, demo_key, service_key
from ..util import http, listeners
from ..util.ports import free_port
from ..util.progress import Progress
from ..util.waiting import poll

PORT_TRIES = 3    # ports picked free for the embedded Ray's Serve proxy, before giving up


@dataclass(frozen=True)
class Served:
    name: str
    url: str                           # the route's base URL (predict: url + "/predict")
    status: str
    checkpoint: str
    changed: bool                      # False: it already ran exactly this
    token: str | None                  # shown once, when it was made (and in --format json)
    token_file: str | None
    cluster: str | None
    demo: str | None = None            # the demo page's URL (`demo: true`), else None

    def as_dict(self) -> dict[str, Any]:
        """Everything but the token, which the caller adds where it may be shown."""
        return {"name": self.name, "url": self.url, "status": self.status,
                "checkpoint": self.checkpoint, "changed": self.changed, "cluster": self.cluster,
                "token_file": self.token_file, "demo": self.demo}


def _problem(spec: ServiceSpec, field: tuple[str, ...], message: str,
             hint: str | None = None) -> SpecError:
    if spec.doc is not None:
        return SpecError([spec.doc.problem(field, message, hint)])
    return SpecError([Problem(str(spec.path), message, field=".".join(field), hint=hint)])


def checkpoint_of(spec: ServiceSpec, state: State) -> str:
    """The checkpoint folder the service serves, checked to have a model card (read as JSON:
    the preprocessor is unpickled only by the replica, `workload.card.load`)."""
    from ..workload import card

    source, which = spec.source, spec.checkpoint
    if spec.experiment is not None:
        source = latest_run(spec.experiment, state)
        if source is None:
            raise _problem(spec, ("model", "experiment"),
                           f"no finished run of {spec.experiment.path} is recorded on this "
                           f"machine", f"run it first: orchestrate run {spec.experiment.path}")
    assert source is not None  # the spec names exactly one source
    try:
        checkpoint = card.locate(source, which) if which else source
        found = card.read(checkpoint)
    except card.CardError as exc:
        raise _problem(spec, ("model",), str(exc)) from None
    problem = card.undigested(found.run, found.card)   # the replica would refuse it: say so now
    if problem:
        raise _problem(spec, ("model",), problem)
    return checkpoint


def _host(cluster: ClusterRecord | None) -> str:
    """The host the Serve proxy binds to: loopback (a cluster's head, reached through an SSH
    forward, on-prem too: the service's token stays off the network; the embedded Ray), or
    the head's address for a cluster whose dashboard still listens there (recorded before)."""
    return "127.0.0.1" if cluster is None or cluster.tunneled else str(cluster.head_ip)


def _http_options(details: dict[str, Any], host: str, spec: ServiceSpec,
                  cluster: ClusterRecord | None) -> tuple[dict[str, Any], str]:
    """Serve's proxy options, and where they come from: those of a Serve already running
    ("running": they cannot change), else the head's address (or loopback) and the service's
    port ("given"; a cluster's default too), or for the embedded Ray a free one ("picked")."""
    current = details.get("http_options") or {}  # present only while Serve runs
    if current.get("port"):
        return dict(current), "running"
    port = spec.http_port or (render.DEFAULT_PORT if cluster else None)
    if port:
        return render.http_options(host, int(port)), "given"
    return render.http_options(host, free_port()), "picked"


def _start(serve: ServeClient, details: dict[str, Any], options: dict[str, Any], source: str,
           apps: list[dict[str, Any]], progress: Progress) -> dict[str, Any]:
    """PUT the applications; the options Serve took. Serve's proxy binds its port only after
    the PUT, and keeps the options it started with until it stops: so when it could not bind
    a port because another process holds it, a Serve this PUT started is shut down again (not
    left unable to serve on any port), and a port picked free (bound by that other process in
    between) is replaced by another free one. Serve was not running before, so no other
    service stops."""
    for attempt in range(1, PORT_TRIES + 1):
        try:
            serve.put(details, options, apps)
            return options
        except PortTaken as exc:
            if source != "running":
                serve.shutdown()
            if source != "picked" or attempt == PORT_TRIES:
                hint = ("set another http_port in the service file, or stop the process that "
                        "holds that port") if source == "given" else None
                raise ServeError(exc.message, hint=hint) from None
            progress(f"port {options['port']} was taken before Serve could bind it; "
                     f"starting Serve on another")
            options = render.http_options(options["host"], free_port())
    raise AssertionError("unreachable")


def _same(deployed: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
    """Whether Serve runs `wanted` already (the package's URI is its content's hash, so a new
    orchestrate redeploys)."""
    return deployed is not None and all(deployed.get(k) == v for k, v in wanted.items())


@contextlib.contextmanager
def reach(url_host: str, port: int, cluster: ClusterRecord | None,
          state: State) -> Iterator[str]:
    """The proxy's base address from here: through an SSH forward to a cluster's head, or
    direct (the embedded Ray; a cluster recorded with its dashboard on the head's address)."""
    if cluster is None or not cluster.tunneled:
        yield f"http://{url_host}:{port}"
        return
    with launch.backend(cluster, state).forward(cluster, port, timeout=20) as local:
        yield f"http://127.0.0.1:{local}"


def _proxy_is_the_embedded_rays(base: str, state: State) -> None:
    """The port the embedded Ray's Serve proxy was given is picked free, then bound by Serve:
    a process of another user (or not of that Ray) could have bound it first and would then
    receive every client's token. So the listener must be held by a process of that Ray (a
    descendant of its `ray start`) before the service is reported up."""
    ray = embedded.current(state.secrets)
    if ray is None:
        raise ServeError("the embedded Ray stopped while the service was being deployed")
    try:
        listeners.check_descendant(base, ray.pid)
    except listeners.NotOurs as exc:
        raise ServeError(f"the Serve proxy's address {base} is not the embedded Ray's ({exc}): "
                         f"clients would send the service's token to it",
                         hint="set another http_port in the service file, or stop the process "
                              "that holds that port") from None


def _healthy(base: str, route: str) -> None:
    def ok() -> bool | None:
        return True if http.status_of(base + route.rstrip("/") + "/healthz") == 200 else None

    if poll(ok, timeout=120, interval=0.5) is None:
        raise ServeError(f"{base}{route}/healthz did not answer 200 within 120 s")


def deploy_file(path: str, state: State, progress: Progress) -> Served:
    """`orchestrate serve FILE`: the service file loaded and deployed."""
    return deploy(load_service(path), state, progress)


def deploy(spec: ServiceSpec, state: State, progress: Progress) -> Served:
    cluster = None
    if spec.cluster is not None:
        cluster = recorded_cluster(state, name=spec.cluster.name, file=spec.cluster.path)
    if cluster is None:
        _gradio_here(spec)
    checkpoint = checkpoint_of(spec, state)
    token, token_file, made = _token(spec, state)
    digest = hashlib.sha256(token.encode()).hexdigest() if token else None
    demo = _demo_secret(spec, state, token is not None)
    demo_digest = hashlib.sha256(demo.encode()).hexdigest() if demo else None
    with open_target(state, cluster, start=True, keep=True, progress=progress) as endpoint:
        serve = ServeClient(endpoint)
        details = serve.details()
        running = running_configs(details)
        ours = next((a for a in running if a.get("name") == spec.name), None)
        url_host = _host(cluster)
        options, source = _http_options(details, url_host, spec, cluster)
        wanted = render.render_application(spec, checkpoint=checkpoint, token_sha256=digest,
                                           package_uri=serve.upload_package(),
                                           demo_sha256=demo_digest,
                                           working_dir_uri=_working_dir(spec, serve))
        owner = render.route_owner(routes(details), wanted)
        if owner:
            raise _problem(spec, ("route_prefix",), f"the route {spec.route_prefix} is served "
                           f"by the application {owner!r}", "choose another route_prefix")
        status = str(((details.get("applications") or {}).get(spec.name) or {}).get("status"))
        changed = not (_same(ours, wanted) and status == "RUNNING")
        if changed:
            progress(f"deploying {spec.name} ({checkpoint}) to {endpoint.label}")
            options = _start(serve, details, options, source, render.merge(running, wanted),
                             progress)
            status = serve.wait(spec.name, progress)
        with reach(url_host, int(options["port"]), cluster, state) as base:
            _healthy(base, spec.route_prefix)
            if cluster is None:
                _proxy_is_the_embedded_rays(base, state)
        url = f"http://{url_host}:{options['port']}{spec.route_prefix.rstrip('/')}"
    state.store.record_service(spec.name, {
        "cluster": cluster.name if cluster else None, "file": str(spec.path.resolve()),
        "url": url, "route_prefix": spec.route_prefix, "checkpoint": checkpoint,
        "auth": token is not None, "demo": spec.demo,
        "deployed_at": time.time()})
    return Served(spec.name, url, status, checkpoint, changed, token if made else None,
                  token_file, cluster.name if cluster else None,
                  demo=f"{url}/demo/" if spec.demo else None)


def _working_dir(spec: ServiceSpec, serve: ServeClient) -> str:
    """`demo: {app}`: the experiment's working_dir uploaded as a job's is (its excludes); the
    placeholder otherwise (not rendered)."""
    if not spec.demo_app or spec.experiment is None:
        return render.WORKING_DIR_PLACEHOLDER
    from ..render.experiment import ship

    shipped = ship(spec.experiment)   # what a run of it ships: the same excludes
    return serve.upload_working_dir(str(spec.experiment.working_dir), list(shipped.excludes))


def _gradio_here(spec: ServiceSpec) -> None:
    """The embedded Ray's replicas run with this Python: the demo page needs Gradio in it."""
    import importlib.util

    if spec.demo and importlib.util.find_spec("gradio") is None:
        raise _problem(spec, ("demo",), "the demo page is a Gradio app, and Gradio is not "
                       "installed in this Python (the embedded Ray's replicas run with it)",
                       "pip install 'orchestrate-ray[demo]'")


def _token(spec: ServiceSpec, state: State) -> tuple[str | None, str | None, bool]:
    """(token, its file, made now): None for `auth: none`; else made once, 0600, and kept."""
    if spec.auth == "none":
        return None, None, False
    key = service_key(spec.name)
    made = not state.secrets.path(key).exists()
    path = state.secrets.ensure(key)
    return state.secrets.read(key), str(path), made


def _demo_secret(spec: ServiceSpec, state: State, token: bool) -> str | None:
    """The demo page's cookie secret: made once (0600) while the file asks for the page of a
    token service, kept across updates; dropped when the page is off, so turning it on again
    makes a new one (and a cookie of the old one lets no one in)."""
    key = demo_key(spec.name)
    if not (token and spec.demo):
        state.secrets.remove(key)
        return None
    state.secrets.ensure(key)
    return state.secrets.read(key)


def demo_secret(name: str, state: State) -> str:
    """The demo page's secret kept here; ServeError if it is gone."""
    try:
        return state.secrets.read(demo_key(name))
    except OrchestrateError:
        raise ServeError(f"the demo page's secret of {name} kept on this machine is gone "
                         f"({state.secrets.path(demo_key(name))})",
                         hint="`orchestrate serve` its file again: that makes a new one") from None


def token(name: str, state: State) -> str | None:
    try:
        return state.secrets.read(service_key(name))
    except OrchestrateError:
        return None


def recorded(name: str, state: State) -> dict[str, Any]:
    entry = state.store.service(name)
    if entry is None:
        known = ", ".join(s["name"] for s in state.store.services()) or "none"
        raise ServeError(f"no service {name!r} was served from this machine (known: {known})")
    return entry


def cluster_of(entry: dict[str, Any], state: State) -> ClusterRecord | None:
    return recorded_cluster(state, name=entry["cluster"]) if entry.get("cluster") else None


def remove(name: str, state: State, progress: Progress) -> bool:
    """Remove just this application (the others keep running); False if it was not there
    (nor recorded: removing twice is not an error, as for `down`)."""
    entry = state.store.service(name)
    if entry is None:
        return False
    cluster = cluster_of(entry, state)
    found = False
    try:
        with open_target(state, cluster) as endpoint:
            serve = ServeClient(endpoint)
            details = serve.details()
            running = running_configs(details)
            found = any(a.get("name") == name for a in running)
            if found:
                serve.put(details, details.get("http_options") or {},
                          render.without(running, name))
                serve.wait(name, progress, gone=True)
    except OrchestrateError:  # the embedded Ray gone: so is every service on it
        if cluster is not None or embedded_endpoint(state) is not None:
            raise
    state.store.forget_service(name)
    state.secrets.remove(service_key(name))
    state.secrets.remove(demo_key(name))
    return found


def status(names: list[str], state: State) -> list[dict[str, Any]]:
    """Each recorded service (or those named): Serve's status, replicas and URL."""
    entries = [recorded(n, state) for n in names] if names else state.store.services()
    rows = []
    for entry in entries:
        row = {"name": entry["name"], "cluster": entry.get("cluster"), "url": entry.get("url"),
               "checkpoint": entry.get("checkpoint"), "status": "NOT_RUNNING", "replicas": 0}
        try:
            with open_target(state, cluster_of(entry, state)) as endpoint:
                app = ServeClient(endpoint).application(entry["name"]) or {}
        except OrchestrateError as exc:
            row["error"] = str(exc)
            app = {}
        if app:
            replicas = [r for d in (app.get("deployments") or {}).values()
                        for r in d.get("replicas") or []]
            row.update(status=app.get("status"),
                       replicas=sum(1 for r in replicas if r.get("state") == "RUNNING"))
        rows.append(row)
    return rows

