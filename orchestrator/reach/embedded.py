"""The embedded Ray: a private `ray start --head --block` child for runs without a cluster.

Never `ray stop`: it kills every Ray process of the user on the host. This Ray gets its own
--temp-dir (short: unix socket paths are limited to ~107 bytes), runs in its own process group,
and is stopped by signalling that group only.

No port is picked for it (issue 29): a port we chose, closed and handed to `ray start` could be
bound first by another user, who would then be sent the token (by our clients, and by Ray's own
processes over gRPC to the GCS). Ray binds each one itself (port 0): the GCS, the dashboard,
the dashboard agent's HTTP and gRPC ports, the runtime-env agent, the metrics exporter, the
raylet's node and object managers and the workers; its Ray Client server, which nothing of
ours uses and whose port cannot be 0, is not started (`no_ray_client`, Ray's RAY_START_HOOK).
We read back the dashboard's port from the dashboard process's own listening socket (found in
/proc among the group's processes) and the GCS's from the port file the GCS writes in its
session folder. Ray makes its temp dir world-writable (0777), so that dir sits inside a 0700
folder of ours: nobody else can reach its port files or sockets. Ray's processes find this Ray
(not another on the host) through RAY_TMPDIR, which points at that folder (the
`ray_current_cluster` file `ray start` writes there), instead of a RAY_ADDRESS we cannot know
before the GCS has bound its port. The dashboard's address is vouched for as the group's
(`util.listeners.vouch`): every request with the token first proves the listener is still a
process of this Ray's group. Left on fixed ports, and sent no token: the dashboard's and the
autoscaler monitor's Prometheus metrics servers (44227, 44217 on all interfaces, Ray's defaults).

It runs with Ray's token authentication (RAY_AUTH_MODE=token): each instance gets a new token
(the SecretStore's key TOKEN_KEY; Ray reads the file through RAY_AUTH_TOKEN_PATH), which our
clients send as `Authorization: Bearer <token>` (`EmbeddedRay.endpoint`).

Several `orchestrate run`s may share it: each registers itself in `users/`. When the last one
leaves, the Ray stays up ("warm") for ORCHESTRATE_EMBEDDED_RAY_IDLE (default 10m, `reach.idle`):
its watchdog (`reach.watchdog`, started with it) stops it once nothing has used it that long.
With that setting at 0, the last one to leave stops it, unless a detached job asked to keep it
(`keep`), which `orchestrate stop --embedded` ends. A recorded Ray found dead, or no longer
answering with our token, is stopped (what is left of it) before another is started. Its
record is this machine's alone (a process id): it lives in the local folder
`$ORCHESTRATE_HOME/local-ray/`, never in a shared state backend. Ray keeps its jobs' logs in
its temp dir: before it stops, they are saved with how each job ended (`keep_logs`,
`reach.archive`), for `logs` and `runs`.

Profiling (the dashboard's flame graphs, stacks and memory profiles; `orchestrate profile`) is
on when the run that started it asked (`profiling: true` in the experiment): Ray reads
RAY_DASHBOARD_ENABLE_PROFILING once, when its dashboard starts. A run that asks for it while a
Ray without it is up gets a note saying so (`PROFILING_OFF`): that Ray is never restarted under
the runs that use it.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..contract import MLFLOW_CREDENTIALS
from ..errors import JobError, OrchestrateError
from ..render.harden import PROFILING_SETTINGS, QUEUE_SETTINGS
from ..state import SecretStore, home
from ..util import http, listeners
from ..util.files import atomic_write, tail
from ..util.locks import Busy, held
from ..util.processes import (
    alive,
    is_embedded_temp_dir,
    kill_naming,
    names_in_command_line,
    ray_command,
    stop_group,
)
from ..util.progress import Progress, silent
from ..util.waiting import until
from . import archive, idle
from .endpoint import EMBEDDED, Endpoint

# The embedded Ray is one node on this machine, never drained or preempted: Ray Train's
# preemption watcher (an actor of its own per run, polling Ray for draining nodes) is only a
# cost there: about 2 s of CPU per run, of the ~45 s a one-epoch MLP run's processes take (measured).
# A job's own env_vars may still turn it on.
ONE_NODE_SETTINGS = {"RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0"}
TOKEN_KEY = "local-ray"
LABEL = "the embedded Ray"


@dataclass(frozen=True)
class EmbeddedRay:
    address: str  # the dashboard / job API, http://127.0.0.1:PORT
    gcs_address: str
    pid: int  # the `ray start --block` process, leader of its own process group
    temp_dir: str
    num_cpus: int
    keep: bool = False
    idle_limit: float = 0.0   # seconds (reach.idle), as the last session to come or go had it
    last_used: float | None = None   # when a session last came or went, or the watchdog saw it
    watchdog: int = 0   # its pid (reach.idle.spawn); 0: none
    profiling: bool = False   # its dashboard answers profiling requests (PROFILING_SETTINGS)

    def endpoint(self, secrets: SecretStore) -> Endpoint:
        listeners.vouch(self.address, self.pid)   # its listener: a process of its group
        return Endpoint(self.address, _token(secrets), LABEL, EMBEDDED)


def _folder() -> Path:
    folder = home() / "local-ray"
    (folder / "users").mkdir(parents=True, exist_ok=True)
    return folder


def record_path() -> Path:
    """Where the record is (its folder is not created: reading it must leave no trace)."""
    return home() / "local-ray" / "record.json"


LOCK_TIMEOUT = 300.0  # starting the embedded Ray takes ~10 s; a holder this long is stuck


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    try:
        with held(_folder() / "lock", action="embedded Ray", timeout=LOCK_TIMEOUT):
            yield
    except Busy as busy:
        raise JobError(f"the embedded Ray's lock ({_folder() / 'lock'}) is held"
                       + (f" by {busy.holder}" if busy.holder else "")
                       + f" for more than {LOCK_TIMEOUT:.0f} s",
                       hint="if that command is gone, remove the lock file") from None


def _token(secrets: SecretStore) -> str | None:
    try:
        return secrets.read(TOKEN_KEY)
    except OrchestrateError:  # no instance, no token
        return None


def _answers(address: str, secrets: SecretStore) -> bool:
    """Our instance answers, and with our token (a stranger on a reused port does not)."""
    token = _token(secrets)
    return token is not None and http.answers(address, token, "/api/jobs/")


def recorded() -> EmbeddedRay | None:
    """What the record says, whether or not that Ray still runs, without the lock or a request
    (`status` and the watchdog read it so too); None for a damaged record (`sound`): its pid
    and temp dir are what `stop` signals and removes."""
    try:
        ray = EmbeddedRay(**json.loads(record_path().read_text()))
    except (OSError, ValueError, TypeError):
        return None
    on_loopback = isinstance(ray.address, str) and ray.address.startswith("http://127.0.0.1:")
    return ray if sound(ray) and on_loopback else None


def sound(ray: EmbeddedRay) -> bool:
    """A record `stop` may act on: a real pid (not init, not us), a temp dir that is an embedded
    Ray's (/tmp/orc-*, or /tmp/orc-*/ray)."""
    return (isinstance(ray.pid, int) and ray.pid > 1 and ray.pid != os.getpid()
            and isinstance(ray.temp_dir, str) and is_embedded_temp_dir(ray.temp_dir))


def _read_record(secrets: SecretStore, *, strangers: bool = False) -> EmbeddedRay | None:
    """The recorded Ray if it runs and answers with our token. JobError if it runs but its
    address is held by a process outside its group (no token is sent there), unless
    `strangers` (stopping it needs no request)."""
    ray = recorded()
    if not ray or not running(ray):
        return None
    listeners.vouch(ray.address, ray.pid)
    try:
        listeners.check(ray.address)
    except listeners.NotOurs as exc:
        if strangers:
            return ray
        raise JobError(f"{LABEL} runs (pid {ray.pid}) but its dashboard address is not its own: "
                       f"{exc}; no token sent",
                       hint="`orchestrate stop --embedded` stops it; the next run starts "
                            "another") from None
    return ray if _answers(ray.address, secrets) else None


def _write_record(ray: EmbeddedRay | None, secrets: SecretStore) -> None:
    _folder()   # made if missing
    path = record_path()
    if ray is None:
        path.unlink(missing_ok=True)
        secrets.remove(TOKEN_KEY)
        return
    atomic_write(path, json.dumps(asdict(ray)))


def client_environment(secrets: SecretStore) -> dict[str, str]:
    """Variables that make Ray's own clients (`ray job submit`, ray.init) use the token."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(secrets.path(TOKEN_KEY))}


def no_ray_client(params: Any, head: bool) -> None:
    """RAY_START_HOOK for `ray start`: no Ray Client server. `ray start` gives it port 10001
    unless told another, never 0, and nothing of ours connects to it."""
    params.ray_client_server_port = None


HOOK = f"{__name__}.no_ray_client"


# `ray start` gives up on its own when the machine is too busy for Ray's fixed waits (the raylet
# waits 15 s for its dashboard agent's port files, `ray start` 30 s for the node; neither is a
# setting in Ray 2.60), and with --block it then stops every process it started. Seen on a
# 2-core machine at a load of 10 and more: the dashboard answered, the raylet aborted
# ("Timed out waiting for file .../metrics_agent_port_..."), and the Ray was gone seconds after
# `start` returned. A start whose `ray start` exits on its own is tried once more.
START_ATTEMPTS = 2
RETRY_NOTE = "`ray start` of the embedded Ray exited during start-up; trying once more"


def start(secrets: SecretStore, num_cpus: int | None = None,
          timeout: float = 120.0, *, profiling: bool = False,
          progress: Progress = silent) -> EmbeddedRay:
    """Start a private head on loopback, its dashboard answering profiling requests if
    `profiling`; returns once its job API answers and its node has joined (its raylet
    registered: past Ray's own start-up waits). A `ray start` that exits on its own before that
    is tried once more (START_ATTEMPTS); one that is still starting at `timeout` is not."""
    log_tail = ""
    for attempt in range(1, START_ATTEMPTS + 1):
        ray, log_tail = _start_once(secrets, num_cpus, timeout, profiling)
        if ray is not None:
            return ray
        if attempt < START_ATTEMPTS:
            progress(RETRY_NOTE)
    raise JobError(f"the embedded Ray did not start:\n{log_tail}")


def _node_joined(address: str, secrets: SecretStore) -> bool:
    """Whether Ray's node table lists a live node (the raylet registered with the GCS)."""
    from ..util.nodes import NODE_TABLE, alive, listed

    try:
        nodes = listed(http.get_json(address, NODE_TABLE, _token(secrets), timeout=5))
    except http.HttpError:
        return False
    return bool(alive(nodes or []))


def _start_once(secrets: SecretStore, num_cpus: int | None, timeout: float,
                profiling: bool) -> tuple[EmbeddedRay | None, str]:
    """One `ray start`: (the Ray, "") once it is up; (None, the tail of its log) when `ray
    start` exited on its own, after stopping what is left of it; JobError when it was still
    starting at `timeout` (stopped too)."""
    num_cpus = num_cpus or max(os.cpu_count() or 1, 4)
    private = tempfile.mkdtemp(prefix="orc-", dir="/tmp")   # 0700: Ray's own dirs are 0777
    temp_dir = os.path.join(private, "ray")
    command = ray_command(
        "start", "--head", "--block", "--disable-usage-stats",
        "--node-ip-address", "127.0.0.1", "--port", "0", "--temp-dir", temp_dir,
        "--dashboard-host", "127.0.0.1", "--dashboard-port", "0",
        "--dashboard-agent-listen-port", "0", "--dashboard-agent-grpc-port", "0",
        "--runtime-env-agent-port", "0", "--metrics-export-port", "0",
        "--min-worker-port", "0", "--max-worker-port", "0", "--num-cpus", str(num_cpus),
    )
    secrets.replace(TOKEN_KEY)  # a new one per instance
    # RAY_AUTH_TOKEN would win over the file; MLflow's credentials go to the jobs that need
    # them as their secrets, not into every process of a Ray that may outlive the run.
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_AUTH_TOKEN", "RAY_ADDRESS") and k not in MLFLOW_CREDENTIALS}
    env.update(client_environment(secrets))
    # Ray processes that look for "their" cluster (Train's placement-group cleaner does) would
    # find every Ray on the host and give up: RAY_TMPDIR points them at this one's
    # `ray_current_cluster` (<temp_dir> is RAY_TMPDIR/ray, Ray's default there).
    env["RAY_TMPDIR"] = private
    env["RAY_START_HOOK"] = HOOK
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # the job's `python` must be this interpreter (a venv need not be activated to use it)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"  # else SIGTERM waits to drain the node
    env.update(QUEUE_SETTINGS)   # runs wait in Ray's job queue for their turn, as on clusters
    env.update(ONE_NODE_SETTINGS)
    for key in PROFILING_SETTINGS:
        env.pop(key, None)       # on only when asked, never inherited
    if profiling:
        env.update(PROFILING_SETTINGS)
    log_path = Path(private) / "ray-start.log"
    with open(log_path, "wb") as log:
        try:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )
        except OSError as exc:
            shutil.rmtree(private, ignore_errors=True)
            raise JobError(f"could not start the embedded Ray: {exc}",
                           hint='pip install "orchestrate-ray[ray]"') from exc
    found: list[EmbeddedRay] = []

    def up() -> bool:
        if process.poll() is not None:
            return True
        if not found:
            ports = _bound_ports(process.pid, temp_dir)
            if ports is None:
                return False
            dash, gcs = ports
            found.append(EmbeddedRay(f"http://127.0.0.1:{dash}", f"127.0.0.1:{gcs}",
                                     process.pid, temp_dir, num_cpus, profiling=profiling))
            listeners.vouch(found[0].address, process.pid)
        return _answers(found[0].address, secrets) and _node_joined(found[0].address, secrets)

    ready = until(up, timeout=timeout, interval=0.5)
    ray = found[0] if found else EmbeddedRay("", "", process.pid, temp_dir, num_cpus)
    if not ready or process.poll() is not None:
        exited = process.poll() is not None
        text = tail(log_path) or "(its log is empty)"
        stop(ray)
        if not exited:
            raise JobError(f"the embedded Ray did not start within {timeout:.0f} s:\n{text}")
        return None, text
    return ray, ""


def _bound_ports(group: int, temp_dir: str) -> tuple[int, int] | None:
    """(dashboard, GCS) ports this Ray bound, once both are known: the one port its dashboard
    process listens on at 127.0.0.1, and the GCS's port file in its session folder (inside
    our 0700 folder: nobody else can have written it)."""
    session = Path(temp_dir) / "session_latest"
    gcs_files = list(session.glob("gcs_server_port_*"))
    if not gcs_files:
        return None
    try:
        gcs = int(gcs_files[0].read_text().strip())
    except (OSError, ValueError):
        return None
    for pid in listeners.members(group):
        if names_in_command_line(pid, "dashboard/dashboard.py") and \
                names_in_command_line(pid, temp_dir):
            ports = listeners.listening_ports(pid, "127.0.0.1")
            return (ports[0], gcs) if len(ports) == 1 else None
    return None


def stop(ray: EmbeddedRay, timeout: float = 30.0) -> None:
    """SIGTERM the head (it stops its children), then SIGKILL what is left of its group, then
    whatever of it left the group (its processes name its temp dir), and its watchdog. The pid
    is signalled only while it is still this Ray's (its command line names the temp dir); a
    damaged record (`sound`) is not acted on at all."""
    if not sound(ray):
        raise JobError(f"the embedded Ray's record is damaged (pid {ray.pid!r}, temp dir "
                       f"{ray.temp_dir!r}); nothing was stopped",
                       hint="stop its processes by hand, then remove "
                            f"{record_path()}")
    if names_in_command_line(ray.pid, ray.temp_dir):
        stop_group(ray.pid, timeout=timeout)
    idle.end(ray.watchdog, ray.pid)   # not us: is_watchdog refuses this process
    kill_naming(ray.temp_dir)
    shutil.rmtree(ray.temp_dir, ignore_errors=True)
    private = _private(ray)
    if private != Path(ray.temp_dir):
        shutil.rmtree(private, ignore_errors=True)


def _private(ray: EmbeddedRay) -> Path:
    """The 0700 folder around Ray's temp dir (older records: the temp dir itself)."""
    private = Path(ray.temp_dir).parent
    return private if Path(ray.temp_dir).name == "ray" and private.name.startswith("orc-") \
        else Path(ray.temp_dir)


def running(ray: EmbeddedRay) -> bool:
    """Whether its head still runs (the pid is alive and still this Ray's)."""
    return alive(ray.pid) and names_in_command_line(ray.pid, ray.temp_dir)


def _user_entry() -> Path:
    """A new `users/` entry's path, one per session: this process's pid first (`live_users`)."""
    return _folder() / "users" / f"{os.getpid()}-{os.urandom(4).hex()}"


def live_users(*, prune: bool = True) -> list[Path]:
    """The `users/` entries of sessions that still run; `prune` (under the lock): remove the
    others."""
    users = []
    for path in (_folder() / "users").iterdir():
        pid = path.name.split("-")[0]
        if pid.isdigit() and alive(int(pid)):
            users.append(path)
        elif prune:
            path.unlink(missing_ok=True)
    return users


def running_at(address: str) -> bool:
    """Whether the embedded Ray recorded at `address` still runs: cheap (no lock, no request),
    for a caller that holds its Endpoint and checks often."""
    ray = recorded()
    return ray is not None and ray.address == address and alive(ray.pid)


def current(secrets: SecretStore) -> EmbeddedRay | None:
    """The embedded Ray if it is up (for `jobs`, `logs`, `stop` without a cluster)."""
    with _locked():
        return _read_record(secrets)


ANSWER_PATIENCE = 10.0   # a loaded machine's dashboard may be slow: not a reason to kill it


def _recover(secrets: SecretStore, progress: Progress) -> EmbeddedRay | None:
    """Under the lock, when the recorded Ray does not answer: the record's Ray if it answers
    after all (a loaded machine's dashboard may be slow); else what is left of it (dead, or
    deaf to our token) is stopped and its record removed, and None (start another)."""
    ray = recorded()
    if ray is None:
        return None
    if running(ray) and until(lambda: _answers(ray.address, secrets), timeout=ANSWER_PATIENCE,
                              interval=1.0):
        return _read_record(secrets)
    why = "no longer answered" if running(ray) else "had stopped"
    progress(f"{LABEL} (pid {ray.pid}) {why}; starting another")
    stop(ray)
    _write_record(None, secrets)
    return None


def _watched(ray: EmbeddedRay) -> EmbeddedRay:
    """With an idle limit, the Ray with a live watchdog (one is started if it has none)."""
    if ray.idle_limit <= 0 or idle.is_watchdog(ray.watchdog, ray.pid):
        return ray
    return replace(ray, watchdog=idle.spawn(ray.pid, _private(ray)))


PROFILING_OFF = ("note: profiling stays off for this run: {label} (pid {pid}) was started "
                 "without it and other runs may use it. When no run uses it, `orchestrate stop "
                 "--embedded`, then run again: the Ray this run starts will have it")


@contextlib.contextmanager
def session(secrets: SecretStore, num_cpus: int | None = None, keep: bool = False,
            progress: Progress = silent,
            profiling: bool = False) -> Iterator[tuple[EmbeddedRay, bool]]:
    """Use the embedded Ray for the duration of the block: reuse one that is up, else start one
    (after stopping what is left of a recorded one that died), with profiling on if
    `profiling` (one that is up without it is used as it is, with a note: PROFILING_OFF).

    Yields (EmbeddedRay, started). On exit, with an idle limit (`reach.idle`), it stays up for
    its watchdog to stop; without, the last user stops it, unless someone asked to keep it."""
    limit = idle.limit()
    me = _user_entry()
    with _locked():
        ray = _read_record(secrets) or _recover(secrets, progress)
        started = ray is None
        if ray is None:
            ray = start(secrets, num_cpus, profiling=profiling, progress=progress)
        elif profiling and not ray.profiling:
            progress(PROFILING_OFF.format(label=LABEL, pid=ray.pid))
        ray = _watched(replace(ray, keep=ray.keep or keep, idle_limit=limit,
                               last_used=time.time()))
        _write_record(ray, secrets)
        me.touch()
    try:
        yield ray, started
    finally:
        _leave(me, ray, secrets, limit)


def _leave(me: Path, ray: EmbeddedRay, secrets: SecretStore, limit: float) -> None:
    with _locked():
        me.unlink(missing_ok=True)
        now = recorded()   # keep: a detached job may have asked since
        if now is None or now.pid != ray.pid:
            return   # stopped by hand, or replaced: not ours to stop
        if limit <= 0 and not now.keep and not live_users():
            keep_logs(now, secrets, stopping=True)
            stop(now)
            _write_record(None, secrets)
            return
        _write_record(_watched(replace(now, idle_limit=limit, last_used=time.time())), secrets)


@contextlib.contextmanager
def user(secrets: SecretStore) -> Iterator[None]:
    """Count as a user of the embedded Ray, if one is up, for the block (`dashboard`): its
    watchdog does not stop it meanwhile. Without an idle limit, nothing (the last run still
    stops it, as before)."""
    limit = idle.limit()
    me = _user_entry()
    with _locked():
        ray = _read_record(secrets) if limit > 0 else None
        if ray is not None:
            me.touch()
    if ray is None:
        yield
        return
    try:
        yield
    finally:
        _leave(me, ray, secrets, limit)


def keep_running(secrets: SecretStore) -> None:
    """Leave the embedded Ray up after this session (a job was left running on it)."""
    with _locked():
        ray = _read_record(secrets)
        if ray is not None:
            _write_record(replace(ray, keep=True), secrets)


def shutdown(secrets: SecretStore) -> bool:
    """Stop the embedded Ray whoever started it, its watchdog too; False if none was up."""
    with _locked():
        ray = _read_record(secrets, strangers=True) or recorded()   # or what is left of it
        if ray is None:
            return False
        was_running = running(ray)
        keep_logs(ray, secrets, stopping=True)
        stop(ray)
        _write_record(None, secrets)
        return was_running


def mark_used(pid: int, secrets: SecretStore) -> bool:
    """For the watchdog of the Ray `pid`: its idle time counts from now. False if the record
    no longer names that Ray."""
    with _locked():
        ray = recorded()
        if ray is None or ray.pid != pid:
            return False
        _write_record(replace(ray, last_used=time.time()), secrets)
        return True


def stop_if(pid: int, still: Callable[[EmbeddedRay], bool], secrets: SecretStore) -> bool:
    """For the watchdog of the Ray `pid`: under the lock, stop it (and remove its record and
    token) if `still(record)` holds. True when the watchdog's work is done: stopped, or the
    record no longer names that Ray."""
    with _locked():
        ray = recorded()
        if ray is None or ray.pid != pid:
            return True
        if not still(ray):
            return False
        keep_logs(ray, secrets, stopping=True)
        stop(ray)
        _write_record(None, secrets)
        return True


def keep_logs(ray: EmbeddedRay, secrets: SecretStore, *, stopping: bool) -> None:
    """Save its jobs' logs and ends where `logs` and `runs` find them after it is gone
    (`archive`): before it stops (`stopping`: the running ones too), and from its watchdog (the
    ended ones). Only while it runs; a failure is said, never in the way of a stop."""
    if not running(ray):
        return
    try:
        endpoint = ray.endpoint(secrets)
        archive.save(endpoint.address, endpoint.token, stopping=stopping)
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the stop goes on
        print(f"note: {LABEL}'s job logs were not all kept: {exc}", file=sys.stderr, flush=True)
