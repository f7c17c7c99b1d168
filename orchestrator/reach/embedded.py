"""The embedded Ray: a private `ray start --head --block` child for runs without a cluster.

Never `ray stop`: it kills every Ray process of the user on the host. This Ray gets its own
--temp-dir (short: unix socket paths are limited to ~107 bytes) and its own free ports, runs in
its own process group, and is stopped by signalling that group only.

It runs with Ray's token authentication (RAY_AUTH_MODE=token): each instance gets a new token
(the SecretStore's key TOKEN_KEY; Ray reads the file through RAY_AUTH_TOKEN_PATH), which our
clients send as `Authorization: Bearer <token>` (`EmbeddedRay.endpoint`).

Several `orchestrate run`s may share it: each registers itself in `users/`; the last one to
leave stops it, unless a detached job asked to keep it (`keep`), which `orchestrate stop
--embedded` ends. Its record is this machine's alone (a process id): it lives in the local
folder `$ORCHESTRATE_HOME/local-ray/`, never in a shared state backend.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..contract import MLFLOW_CREDENTIALS
from ..errors import JobError, OrchestrateError
from ..state import SecretStore, home
from ..util import http
from ..util.files import atomic_write, tail
from ..util.locks import Busy, held
from ..util.ports import free_ports
from ..util.processes import alive, kill_naming, names_in_command_line, ray_command, stop_group
from ..util.waiting import until
from .endpoint import EMBEDDED, Endpoint

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

    def endpoint(self, secrets: SecretStore) -> Endpoint:
        return Endpoint(self.address, _token(secrets), LABEL, EMBEDDED)


def _folder() -> Path:
    folder = home() / "local-ray"
    (folder / "users").mkdir(parents=True, exist_ok=True)
    return folder


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


def _recorded() -> EmbeddedRay | None:
    """What the record says, whether or not that Ray still runs."""
    try:
        return EmbeddedRay(**json.loads((_folder() / "record.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _read_record(secrets: SecretStore) -> EmbeddedRay | None:
    """The recorded Ray if it runs and answers with our token."""
    ray = _recorded()
    return ray if ray and alive(ray.pid) and _answers(ray.address, secrets) else None


def _write_record(ray: EmbeddedRay | None, secrets: SecretStore) -> None:
    path = _folder() / "record.json"
    if ray is None:
        path.unlink(missing_ok=True)
        secrets.remove(TOKEN_KEY)
        return
    atomic_write(path, json.dumps(asdict(ray)))


def client_environment(secrets: SecretStore) -> dict[str, str]:
    """Variables that make Ray's own clients (`ray job submit`, ray.init) use the token."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(secrets.path(TOKEN_KEY))}


def start(secrets: SecretStore, num_cpus: int | None = None,
          timeout: float = 120.0) -> EmbeddedRay:
    """Start a private head on loopback; returns once its job API answers."""
    num_cpus = num_cpus or max(os.cpu_count() or 1, 4)
    gcs, dash, client, agent, agent_grpc, env_agent, metrics = free_ports(7)
    temp_dir = tempfile.mkdtemp(prefix="orc-", dir="/tmp")
    command = ray_command(
        "start", "--head", "--block", "--disable-usage-stats",
        "--node-ip-address", "127.0.0.1", "--port", str(gcs), "--temp-dir", temp_dir,
        "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
        "--ray-client-server-port", str(client), "--dashboard-agent-listen-port", str(agent),
        "--dashboard-agent-grpc-port", str(agent_grpc), "--runtime-env-agent-port",
        str(env_agent), "--metrics-export-port", str(metrics),
        "--min-worker-port", "0", "--max-worker-port", "0", "--num-cpus", str(num_cpus),
    )
    secrets.replace(TOKEN_KEY)  # a new one per instance
    # RAY_AUTH_TOKEN would win over the file; MLflow's credentials go to the jobs that need
    # them as their secrets, not into every process of a Ray that may outlive the run.
    env = {k: v for k, v in os.environ.items()
           if k != "RAY_AUTH_TOKEN" and k not in MLFLOW_CREDENTIALS}
    env.update(client_environment(secrets))
    # Ray processes that look for "their" cluster (Train's placement-group cleaner does) would
    # find every Ray on the host and give up; point them at this one.
    env["RAY_ADDRESS"] = f"127.0.0.1:{gcs}"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # the job's `python` must be this interpreter (a venv need not be activated to use it)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"  # else SIGTERM waits to drain the node
    log_path = Path(temp_dir) / "ray-start.log"
    with open(log_path, "wb") as log:
        try:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )
        except OSError as exc:
            raise JobError(f"could not start the embedded Ray: {exc}",
                           hint='pip install "orchestrate[ray]"') from exc
    ray = EmbeddedRay(f"http://127.0.0.1:{dash}", f"127.0.0.1:{gcs}", process.pid, temp_dir,
                      num_cpus)
    up = until(lambda: process.poll() is not None or _answers(ray.address, secrets),
               timeout=timeout, interval=0.5)
    if not up or process.poll() is not None:
        text = tail(log_path)
        stop(ray)
        raise JobError(f"the embedded Ray did not start:\n{text}")
    return ray


def stop(ray: EmbeddedRay, timeout: float = 30.0) -> None:
    """SIGTERM the head (it stops its children), then SIGKILL what is left of its group, then
    whatever of it left the group (its processes name its temp dir). The pid is signalled only
    while it is still this Ray's (its command line names the temp dir)."""
    if names_in_command_line(ray.pid, ray.temp_dir):
        stop_group(ray.pid, timeout=timeout)
    kill_naming(ray.temp_dir)
    shutil.rmtree(ray.temp_dir, ignore_errors=True)


def _live_users() -> list[Path]:
    users = []
    for path in (_folder() / "users").iterdir():
        pid = path.name.split("-")[0]
        if pid.isdigit() and alive(int(pid)):
            users.append(path)
        else:
            path.unlink(missing_ok=True)
    return users


def running_at(address: str) -> bool:
    """Whether the embedded Ray recorded at `address` still runs: cheap (no lock, no request),
    for a caller that holds its Endpoint and checks often."""
    ray = _recorded()
    return ray is not None and ray.address == address and alive(ray.pid)


def current(secrets: SecretStore) -> EmbeddedRay | None:
    """The embedded Ray if it is up (for `jobs`, `logs`, `stop` without a cluster)."""
    with _locked():
        return _read_record(secrets)


@contextlib.contextmanager
def session(secrets: SecretStore, num_cpus: int | None = None,
            keep: bool = False) -> Iterator[tuple[EmbeddedRay, bool]]:
    """Use the embedded Ray for the duration of the block: reuse one that is up, else start one.

    Yields (EmbeddedRay, started). On exit the last user stops it, unless someone asked to keep it.
    """
    me = _folder() / "users" / f"{os.getpid()}-{os.urandom(4).hex()}"  # one per session
    with _locked():
        ray = _read_record(secrets)
        started = ray is None
        if ray is None:
            ray = start(secrets, num_cpus)
        if keep and not ray.keep:
            ray = replace(ray, keep=True)
        _write_record(ray, secrets)
        me.touch()
    try:
        yield ray, started
    finally:
        with _locked():
            me.unlink(missing_ok=True)
            ray = _recorded() or ray  # keep: a detached job may have asked since
            if not ray.keep and not _live_users():
                stop(ray)
                _write_record(None, secrets)


def keep_running(secrets: SecretStore) -> None:
    """Leave the embedded Ray up after this session (a job was left running on it)."""
    with _locked():
        ray = _read_record(secrets)
        if ray is not None:
            _write_record(replace(ray, keep=True), secrets)


def shutdown(secrets: SecretStore) -> bool:
    """Stop the embedded Ray whoever started it; False if none was up."""
    with _locked():
        ray = _read_record(secrets)
        if ray is None:
            return False
        stop(ray)
        _write_record(None, secrets)
        return True
