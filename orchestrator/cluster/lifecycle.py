"""`up` and `down`: the decision (nothing to do, --no-restart, full `ray up`) and the record
kept around Ray's launcher. Callers hold `state.locked(name)` for the whole operation.
"""
from __future__ import annotations

import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from ..errors import ClusterError, OrchestrateError
from . import changes, launcher, state
from .access import open_record
from .health import Health, probe

Progress = Callable[[str], None]
Confirm = Callable[[str], bool]

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class UpResult:
    record: state.Record
    action: str                    # created | unchanged | updated | restarted
    changes: list = field(default_factory=list)
    health: Health | None = None


def up(*, name: str, provider: str, file: str, config: dict, progress: Progress,
       confirm: Confirm, preflight: Callable[[], None] = lambda: None, timeout: float = 1800,
       wait_timeout: float = 600, wait: bool = True) -> UpResult:
    """Launch or update; `preflight` runs only when something is to be done."""
    folder = state.cluster_dir(name)
    rendered = state.rendered_path(name)
    old = state.read_record(name)
    try:
        old_config = state.read_rendered(name) if old else None
    except ClusterError as exc:  # written again below; only the list of changes is lost
        progress(f"warning: {exc.message}")
        old_config = None
    new_hash = changes.config_hash(config)
    alive = None
    if old and old.state == state.UP:
        alive = _alive(old, progress)
        if alive and old.config_hash == new_hash:
            return UpResult(old, "unchanged", [], alive)
    try:
        preflight()
    except BaseException:
        if old is None:
            state.remove(name)  # leave no trace of a cluster that never started
        raise
    diff = changes.diff(old_config, config) if old_config is not None else []
    no_restart = bool(alive) and changes.only_scaling(diff)
    if diff:
        progress(f"changes to cluster {name} since the last up:")
        for line in diff:
            progress(f"  {line}")
    if alive and not no_restart and not confirm(
            f"Ray on the head of {name} will restart; running jobs will be stopped. Continue?"):
        raise OrchestrateError("cancelled; nothing was changed")

    token = state.read_token(name)
    state.atomic_write(rendered, json.dumps(config, indent=2, sort_keys=True) + "\n")
    record = state.Record(name=name, provider=provider, file=file, config_hash=new_hash,
                          state=state.LAUNCHING, head_ip=old.head_ip if old else None,
                          created_at=old.created_at if old else time.time())
    record.dashboard_host, record.dashboard_port = dashboard_binding(config)
    state.write_record(record)

    action = "created" if not old or old.state != state.UP else (
        "updated" if no_restart else "restarted")
    progress(f"{'updating' if no_restart else 'launching'} cluster {name} with `ray up`"
             f"{' --no-restart (Ray keeps running on the head)' if no_restart else ''}"
             f" (log: {folder / 'up.log'})")
    args = ["up", str(rendered), "-y", "--no-config-cache", "--log-style", "record",
            "--log-color", "false"] + (["--no-restart"] if no_restart else [])
    try:
        launcher.run_ray(args, log_path=folder / "up.log", progress=progress, timeout=timeout,
                         env=launcher_env(name, provider), secrets=[token])
        record.head_ip = head_address(name, provider, config, progress)
    except KeyboardInterrupt:
        _fail(record, state.INTERRUPTED, "interrupted during `ray up`; nodes may be running")
        raise
    except ClusterError as exc:
        _fail(record, state.FAILED, exc.message)
        raise ClusterError(exc.message, hint=f"{exc.hint}; nodes may be running: "
                                             f"`orchestrate down {name}` removes them") from None
    record.state = state.UP
    record.address = None if record.tunneled else \
        f"http://{record.head_ip}:{record.dashboard_port}"
    state.write_record(record)
    health = _wait_nodes(record, expected_nodes(config), wait_timeout, progress) if wait else None
    return UpResult(record, action, diff, health)


def down(record: state.Record, *, progress: Progress, timeout: float = 900) -> None:
    folder = state.cluster_dir(record.name)
    rendered = state.rendered_path(record.name)
    config = state.read_rendered(record.name)
    if config is None:  # `up` stopped before anything was handed to Ray
        state.remove(record.name)
        return
    record.state, record.message = state.STOPPING, None
    state.write_record(record)
    progress(f"tearing down cluster {record.name} with `ray down` (log: {folder / 'down.log'})")
    try:
        launcher.run_ray(["down", str(rendered), "-y", "--log-style", "record",
                          "--log-color", "false"],
                         log_path=folder / "down.log", progress=progress, timeout=timeout,
                         env=launcher_env(record.name, record.provider),
                         secrets=_known_token(record.name))
        if record.provider == "local":
            _stop_local_workers(config, progress)
    except (ClusterError, KeyboardInterrupt) as exc:
        _fail(record, state.STOPPING, getattr(exc, "message", "interrupted during `ray down`"))
        raise
    state.remove(record.name)


def _stop_local_workers(config: dict, progress: Progress) -> None:
    """`ray down` stops Ray on the head only; on-premise workers keep running without this."""
    from .ssh import run_remote

    auth = config.get("auth") or {}
    workers = (config.get("provider") or {}).get("worker_ips") or []

    def stop(ip: str) -> str | None:
        try:
            # A worker the head's autoscaler was still starting may come up after the first
            # `ray stop`: end any `ray start` in flight, then stop again.
            run_remote(auth, ip, 'ray stop; pkill -u "$(id -u)" -f "[r]ay start"; sleep 2; '
                                 'ray stop', timeout=90)
        except ClusterError as exc:
            return exc.message
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(workers)))) as pool:
        for ip, problem in zip(workers, pool.map(stop, workers)):
            if problem:
                progress(f"  warning: could not stop Ray on worker {ip}: {problem}")


def _known_token(name: str) -> list[str]:
    """The cluster's token, to be masked in every launcher log (none after a very early failure)."""
    try:
        return [state.read_token(name)]
    except ClusterError:
        return []


def launcher_env(name: str, provider: str) -> dict:
    # The launcher's own files (local provider state, config cache, bootstrap temp files) live
    # in the cluster's state folder, not in /tmp where other clusters and users meet.
    scratch = state.cluster_dir(name) / "launcher"
    scratch.mkdir(parents=True, exist_ok=True)
    env = {"RAY_TMPDIR": str(scratch), "TMPDIR": str(scratch)}
    if provider == "local":
        # Measured with Ray 2.60: autoscaler v2 on a local (on-premise) cluster marks the head's
        # own entry terminated and launches only one of the workers; v1 launches them all.
        env["RAY_UP_enable_autoscaler_v2"] = os.environ.get("RAY_UP_enable_autoscaler_v2", "0")
        # The hosts exist already: do not wait Ray's default 15 minutes for SSH.
        env["AUTOSCALER_NODE_START_WAIT_S"] = os.environ.get("AUTOSCALER_NODE_START_WAIT_S", "60")
    return env


def dashboard_binding(config: dict) -> tuple[str, int]:
    head = " ".join(config.get("head_start_ray_commands") or [])
    host = re.search(r"--dashboard-host(?:=|\s+)(\S+)", head)
    port = re.search(r"--dashboard-port(?:=|\s+)(\d+)", head)
    return (host.group(1) if host else "localhost", int(port.group(1)) if port else 8265)


def head_address(name: str, provider: str, config: dict, progress: Progress) -> str:
    if provider == "local":
        return config["provider"]["head_ip"]
    rendered = state.rendered_path(name)
    output = launcher.run_ray(["get-head-ip", str(rendered)], progress=lambda _: None,
                              log_path=state.cluster_dir(name) / "up.log", timeout=120,
                              env=launcher_env(name, provider), secrets=_known_token(name))
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        raise ClusterError("`ray get-head-ip` printed no address")
    return lines[-1]


def expected_nodes(config: dict) -> int:
    """The head plus the workers Ray keeps running at the least."""
    provider = config.get("provider") or {}
    if provider.get("type") == "local":
        workers = len(provider.get("worker_ips") or [])
        for key in ("min_workers", "max_workers"):
            if isinstance(config.get(key), int):
                workers = min(workers, config[key])
        return 1 + workers
    head_type = config.get("head_node_type")
    return 1 + sum(int(t.get("min_workers") or 0)
                   for n, t in (config.get("available_node_types") or {}).items() if n != head_type)


def _alive(record: state.Record, progress: Progress) -> Health | None:
    try:
        with open_record(record, timeout=15) as access:
            return probe(access.address, access.token)
    except ClusterError as exc:
        progress(f"cluster {record.name} is recorded as up but {exc.message}")
        return None


def _wait_nodes(record: state.Record, expected: int, timeout: float,
                progress: Progress) -> Health:
    deadline = time.monotonic() + timeout
    seen, health, error = -1, None, None
    with open_record(record, timeout=60) as access:
        while True:
            try:
                health, error = probe(access.address, access.token), None
            except ClusterError as exc:
                error = exc.message
            if health and health.nodes_alive != seen:
                seen = health.nodes_alive
                progress(f"  {seen}/{expected} nodes alive")
            if health and health.nodes_alive >= expected:
                return health
            if time.monotonic() > deadline:
                break
            time.sleep(2)
    message = (f"only {seen if seen >= 0 else 0} of {expected} nodes joined within "
               f"{timeout:.0f} s" + (f" ({error})" if error else ""))
    record.message = message
    state.write_record(record)
    raise ClusterError(f"cluster {record.name} is up but {message}",
                       hint="see `orchestrate status`; the head's autoscaler log is "
                            "/tmp/ray/session_latest/logs/monitor.* on the head")


def _fail(record: state.Record, new_state: str, message: str) -> None:
    record.state, record.message = new_state, message
    state.write_record(record)
