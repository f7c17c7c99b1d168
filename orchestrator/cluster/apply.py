"""`up` and `down`: refresh what is live, plan (cluster.plan, pure), then carry the plan out
through the cluster's launch backend (`orchestrator.launch.backend`: `ray up` over SSH),
keeping the record true at every step.

    up(spec, state, options, progress, confirm) -> UpResult
    tear_down(name, state, progress, timeout) -> ClusterRecord | None

The record is written before each step that can fail half way, so an interrupted `up` leaves
`launching`/`interrupted`/`failed` behind (and `down` cleans up after it), never a record that
claims more than was done.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import launch, providers
from ..actions import Action
from ..errors import ClusterError, KeyRefused, NotContacted, OrchestrateError, PreflightError
from ..language.cluster import ClusterSpec
from ..launch.ray_up import known_hosts
from ..reach.endpoint import open_cluster
from ..render.cluster import RenderedCluster, render_cluster
from ..state import FAILED, INTERRUPTED, LAUNCHING, STOPPING, UP, ClusterRecord, State, cluster_key
from ..util.progress import Progress
from ..util.ssh import HostKeyChanged
from ..util.waiting import poll
from . import archive, tls
from .health import Health, TokenRefused, probe, probe_cluster
from .plan import ClusterPlan, Recorded, plan_cluster

Confirm = Callable[[str], bool]

@dataclass(frozen=True)
class UpOptions:
    preflight: bool = True
    wait: bool = True              # for the node types' min_workers
    timeout: float = 1800          # for `ray up`
    wait_timeout: float = 600      # for the nodes
    down_timeout: float = 900      # for `ray down`, when the plan replaces the cluster
    # What Ray was last handed, when it is not the rendered file here (a project's state: data
    # for the diff; what runs is the file here, made from the repository's cluster file).
    recorded_config: dict[str, Any] | None = None


@dataclass
class UpResult:
    record: ClusterRecord
    plan: ClusterPlan
    health: Health | None = None

    @property
    def action(self) -> str:
        return self.plan.action.done


# (forward's timeout, each answer's timeout) of each try at a cluster recorded up
PROBE_WAITS = ((15.0, 5.0), (30.0, 20.0))
PROBE_PAUSE_S = 1.0   # between tries


def refresh(record: ClusterRecord | None, state: State, progress: Progress) -> Health | None:
    """What the cluster answers now (None when it is not recorded up, or does not answer)."""
    if record is None or record.state != UP:
        return None
    # A cluster that does not answer is planned a restart, which stops its jobs: a busy head
    # (a dashboard slow to answer or answering 500/429, an SSH forward slow to open) is asked
    # once more, waiting longer, before it is taken for gone. A refused token is an answer, and
    # a cluster nothing could reach (no kubeconfig) is not busy: neither is asked again. A head
    # that refuses this machine's key runs: `up` stops there, saying so.
    for attempt, (timeout, answer_timeout) in enumerate(PROBE_WAITS):
        if attempt:
            time.sleep(PROBE_PAUSE_S)
        try:
            return probe_cluster(record, state, timeout=timeout, answer_timeout=answer_timeout)
        except (TokenRefused, NotContacted) as exc:
            progress(f"cluster {record.name} is recorded as up but {exc.message}")
            return None
        except KeyRefused as exc:   # it runs, but this machine may not log in: no restart
            raise ClusterError(f"cluster {record.name} is recorded as up, but {exc.message}",
                               hint=exc.hint) from None
        except ClusterError as exc:
            again = attempt + 1 < len(PROBE_WAITS)
            progress(f"cluster {record.name} is recorded as up but {exc.message}"
                     + ("; asking again, waiting longer" if again else ""))
    return None


def _recorded(name: str, state: State, progress: Progress) -> Recorded | None:
    record = state.store.read_cluster(name)
    if record is None:
        return None
    try:
        config = state.store.read_rendered(name)
    except ClusterError as exc:  # written again by the apply; only the list of changes is lost
        progress(f"warning: {exc.message}")
        config = None
    return Recorded(record, config)


def up(spec: ClusterSpec, state: State, options: UpOptions, progress: Progress,
       confirm: Confirm) -> UpResult:
    """Launch or update the cluster of `spec`; preflight runs only when something is to be done."""
    with state.store.lock(spec.name, action="up"):
        token_file = state.secrets.ensure(cluster_key(spec.name))
        rendered = render_cluster(spec, token_file=str(token_file))
        recorded = _recorded(spec.name, state, progress)
        if recorded is not None and options.recorded_config is not None:
            recorded = Recorded(recorded.record, options.recorded_config)
        live = refresh(recorded.record if recorded else None, state, progress)
        plan = plan_cluster(rendered, recorded, live)
        if plan.action is Action.NOOP:
            assert recorded is not None
            _tell_watcher(recorded.record, rendered.config, state, progress, changed=False)
            return UpResult(recorded.record, plan, live)
        if options.preflight:
            try:
                for result in providers.ensure_ready(spec):
                    if result.status == providers.WARN:
                        progress(f"warning: {providers.described(spec, result)}")
            except BaseException as exc:
                if recorded is None:  # leave no trace of a cluster that never started
                    state.store.forget_cluster(spec.name)
                    state.secrets.remove(cluster_key(spec.name))
                if isinstance(exc, PreflightError):
                    exc.hint = (f"nothing was {'launched' if recorded is None else 'changed'}; "
                                f"{exc.hint}")
                raise
        if plan.changes:
            progress(f"changes to cluster {spec.name} since the last up:")
            for line in plan.changes:
                progress(f"  {line}")
            if plan.resource_changes:
                progress("  in the RayCluster:")
                for line in plan.resource_changes:
                    progress(f"    {line}")
        if plan.needs_confirmation and not confirm(_question(plan)):
            raise OrchestrateError("cancelled; nothing was changed")
        names = providers.get(spec.provider).tls_names(rendered.config)
        if names:  # the node folder the rendered config mounts (render.harden.tls_folder)
            tls.ensure(state, spec.name, names)
        return apply(plan, rendered, recorded, state, options, progress)


def _question(plan: ClusterPlan) -> str:
    if plan.action is Action.REPLACE:
        return (f"Cluster {plan.name} will be torn down and launched again ({plan.reason}); "
                f"running jobs will be stopped. Continue?")
    return (f"Ray on the head of {plan.name} will restart; running jobs will be stopped. "
            f"Continue?")


def apply(plan: ClusterPlan, rendered: RenderedCluster, recorded: Recorded | None, state: State,
          options: UpOptions, progress: Progress) -> UpResult:
    """Carry out a create, update, restart or replace of `rendered`."""
    name = rendered.name
    old = recorded.record if recorded else None
    if plan.action is Action.REPLACE and old is not None:
        progress(f"replacing cluster {name}: {plan.reason}")
        _down(old, state, progress, timeout=options.down_timeout, forget=False)
        old = None
    backend = launch.backend(rendered, state, progress)
    if old is not None and plan.action is not Action.UPDATE:
        _forget_gone_hosts(old, rendered.config, state, progress)
    config_file = state.store.write_rendered(name, rendered.config)
    record = ClusterRecord(name=name, provider=rendered.provider, file=rendered.file,
                           config_hash=rendered.config_hash, state=LAUNCHING,
                           head_ip=old.head_ip if old else None,
                           dashboard_host=rendered.dashboard.host,
                           dashboard_port=rendered.dashboard.port,
                           created_at=old.created_at if old else time.time(),
                           up_at=old.came_up if old else None)
    state.store.write_cluster(record)
    in_place = plan.action is Action.UPDATE
    progress(f"{'updating' if in_place else 'launching'} cluster {name} with "
             f"{backend.command('up', in_place=in_place)} (log: {backend.log_path(name, 'up')})")
    try:
        backend.launch(name, rendered.provider, config_file, restart=not in_place,
                       timeout=options.timeout)
        record.head_ip = backend.head_address(name, rendered.provider, config_file)
    except KeyboardInterrupt:
        _fail(record, state, INTERRUPTED,
              f"interrupted during {backend.command('up')}; nodes may be running")
        raise
    except ClusterError as exc:
        _fail(record, state, FAILED, exc.message)
        raise ClusterError(exc.message, hint=f"{exc.hint}; nodes may be running: "
                                             f"`orchestrate down {name}` removes them") from None
    record.state = UP
    if not in_place:   # launched or restarted: the cost since up counts from now
        record.up_at = time.time()
    record.address = None if record.tunneled else \
        f"http://{record.head_ip}:{record.dashboard_port}"
    state.store.write_cluster(record)
    health = _wait_nodes(record, rendered, state, options.wait_timeout,
                         progress) if options.wait else None
    _tell_watcher(record, rendered.config, state, progress, changed=True)
    return UpResult(record, plan, health)


def _forget_gone_hosts(record: ClusterRecord, config: dict[str, Any], state: State,
                       progress: Progress) -> None:
    """Before a cloud cluster is launched again: when the cloud, asked with this machine's own
    credentials, runs no head for it (autostop took it down, or the cloud did), its instances
    are gone and so are the machines whose host keys were pinned; the new instances, which may
    be given the old addresses, are pinned when first met. Nothing is forgotten when the cloud
    cannot be asked, or on hosts that outlive their cluster (on-prem: a changed key there is
    what pinning is for)."""
    from ..launch.ray_up.cloud_head import CloudUnasked, running_head, where

    if launch.Feature.HEAD_THROUGH_API in launch.features(record.provider) \
            or providers.get(record.provider).FIXED_HOSTS \
            or not known_hosts.path(state, record.name).read_text().strip():
        return
    try:
        head = running_head(config)
    except CloudUnasked:
        return
    if head is None:
        known_hosts.forget(state, record.name)
        progress(f"  {where(config)} runs no head of cluster {record.name}: its instances are "
                 "gone, and the host keys pinned for them are forgotten (the new instances' are "
                 "pinned when first met)")


def _tell_watcher(record: ClusterRecord, config: dict[str, Any], state: State,
                  progress: Progress, *, changed: bool) -> None:
    """At the end of an `up`, on a head with autostop: after a change, touch the file from
    which the watcher's idle clock starts (head/autostop.py up_activity: setup is not idle
    time); and start the watcher when it is not running, for an `up` whose start commands did
    not run (a second watcher exits at once: the first holds a lock). A failure is a warning:
    the cluster is up all the same, and `status` says when the watcher is silent."""
    import shlex

    from .. import cluster_settings
    from ..render.cluster import REMOTE_HOME, WATCHER_START

    if cluster_settings.autostop(config) is None or record.head_ip is None:
        return
    touch = f"mkdir -p {REMOTE_HOME} && touch {REMOTE_HOME}/up-done && " if changed else ""
    try:   # a login shell, as Ray's launcher runs the start commands: `ray` on its PATH
        launch.backend(record, state).output(
            record, f"bash --login -c {shlex.quote(touch + WATCHER_START)}", timeout=30)
    except ClusterError as exc:
        progress(f"warning: the autostop watcher could not be told on the head: {exc.message}")


def tear_down(name: str, state: State, progress: Progress, *,
              timeout: float = 900) -> ClusterRecord | None:
    """`orchestrate down`: under the cluster's lock, tear it down and forget it. None when it
    was already gone (another `down` got there first)."""
    with state.store.lock(name, action="down"):
        record = state.store.read_cluster(name)
        plan = plan_cluster(None, Recorded(record) if record else None, None)
        if plan.action is Action.DESTROY and record is not None:
            _down(record, state, progress, timeout=timeout)
        else:
            state.store.forget_cluster(name)  # only the lock's folder is left
    return record


def _down(record: ClusterRecord, state: State, progress: Progress, *,
          timeout: float = 900, forget: bool = True) -> None:
    """Tear the cluster down with the config last handed to Ray (with the backend of the
    recorded provider, which a replace is moving away from); then forget it (`forget`)."""
    name = record.name
    config = state.store.read_rendered(name)
    if config is not None:  # else `up` stopped before anything was handed to Ray
        backend = launch.backend(record, state, progress)
        was = record.state
        record.state, record.message = STOPPING, None
        state.store.write_cluster(record)
        _keep_logs(record, config, state, progress)
        progress(f"tearing down cluster {name} with {backend.command('down')} "
                 f"(log: {backend.log_path(name, 'down')})")
        try:
            backend.teardown(name, record.provider, state.store.rendered_path(name),
                             timeout=timeout)
            pinned = {**config, "auth": known_hosts.pinned(dict(config.get("auth") or {}),
                                                           state, name)}
            try:
                warnings = providers.get(record.provider).after_down(pinned, progress)
            except HostKeyChanged as changed:
                raise ClusterError(str(changed), hint=known_hosts.hint(name, changed.host)) \
                    from None
            for warning in warnings:
                progress(f"  warning: {warning}")
        except NotContacted as exc:   # nothing was torn down: the cluster is as recorded
            _fail(record, state, was, exc.message)
            raise
        except (ClusterError, KeyboardInterrupt) as exc:
            message = exc.message if isinstance(exc, ClusterError) else \
                f"interrupted during {backend.command('down')}"
            _fail(record, state, STOPPING, message)
            raise
    known_hosts.forget(state, name)   # the nodes are gone; a replace pins its new ones anew
    if forget:
        state.store.forget_cluster(name)
        state.secrets.remove(cluster_key(name))
        tls.forget(state, name)


def _keep_logs(record: ClusterRecord, config: dict[str, Any], state: State,
               progress: Progress) -> None:
    """The cluster's logs archived first (`cluster.archive`); a failure warns, never blocks
    the teardown (a head that is gone has nothing to give)."""
    if not record.head_ip:
        return
    progress(f"archiving the logs of cluster {record.name}")
    try:
        where = archive.keep_logs(record, config, state, progress)
    except Exception as exc:  # noqa: BLE001 - boto3's, ssh's, Ray's: none may block `down`
        message = exc.message if isinstance(exc, OrchestrateError) else \
            f"{type(exc).__name__}: {exc}"
        progress(f"  warning: the logs were not archived ({message}); tearing down anyway")
        return
    progress(f"  logs archived to {where}")


def _wait_nodes(record: ClusterRecord, rendered: RenderedCluster, state: State, timeout: float,
                progress: Progress) -> Health:
    expected = rendered.expected_nodes
    seen, error, last = -1, "", None
    with open_cluster(record, state, timeout=60) as endpoint:
        def enough() -> Health | None:
            nonlocal seen, error, last
            try:
                health, error = probe(endpoint), ""
            except ClusterError as exc:
                error = exc.message
                return None
            last = health
            if health.nodes_alive != seen:
                seen = health.nodes_alive
                progress(f"  {seen}/{expected} nodes alive")
            return health if health.nodes_alive >= expected else None

        health = poll(enough, timeout=timeout, interval=0.5)  # two small GETs to the head
    if health is not None:
        return health
    missing = providers.get(rendered.provider).not_joined(rendered.config,
                                                          last.node_ips if last else ())
    message = (f"partial: only {max(seen, 0)} of {expected} nodes joined within {timeout:.0f} s"
               + (f"; not joined: {', '.join(missing)}" if missing else "")
               + (f" ({error})" if error else ""))
    record.message = message
    state.store.write_cluster(record)
    raise ClusterError(f"cluster {record.name} is up but {message}",
                       hint=f"check {'those hosts' if missing else 'the nodes'}, then `orchestrate up` "
                            f"again, or `orchestrate down {record.name}`; the head's autoscaler log "
                            "is /tmp/ray/session_latest/logs/monitor.* on the head")


def _fail(record: ClusterRecord, state: State, new_state: str, message: str) -> None:
    record.state, record.message = new_state, message
    state.store.write_cluster(record)
