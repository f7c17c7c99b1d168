"""The embedded local Ray: a private `ray start --head --block` child for runs without a cluster.

Never `ray stop`: it kills every Ray process of the user on the host. This Ray gets its own
--temp-dir (short: unix socket paths are limited to ~107 bytes) and its own free ports, runs in
its own process group, and is stopped by signalling that group only.

It runs with Ray's token authentication (RAY_AUTH_MODE=token): each instance gets a new token,
stored 0600 in `$ORCHESTRATE_HOME/local-ray/auth_token` (Ray reads it through
RAY_AUTH_TOKEN_PATH); our clients send it as `Authorization: Bearer <token>`.

Several `orchestrate run`s may share it: each registers itself in `users/`; the last one to
leave stops it, unless a detached job asked to keep it (`keep`), which `orchestrate stop
--local-ray` ends.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from ..cluster.state import atomic_write, home
from ..errors import JobError


@dataclass(frozen=True)
class LocalRay:
    address: str  # the dashboard / job API, http://127.0.0.1:PORT
    gcs_address: str
    pid: int  # the `ray start --block` process, leader of its own process group
    temp_dir: str
    num_cpus: int
    keep: bool = False


def _folder() -> Path:
    folder = home() / "local-ray"
    (folder / "users").mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def _locked():
    with open(_folder() / "lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as dead
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _read_record() -> LocalRay | None:
    try:
        data = json.loads((_folder() / "record.json").read_text())
        ray = LocalRay(**data)
    except (OSError, ValueError, TypeError):
        return None
    return ray if _alive(ray.pid) and _answers(ray.address) else None


def _write_record(ray: LocalRay | None) -> None:
    path = _folder() / "record.json"
    if ray is None:
        path.unlink(missing_ok=True)
        token_path().unlink(missing_ok=True)
        return
    atomic_write(path, json.dumps(asdict(ray)))


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def token_path() -> Path:
    return _folder() / "auth_token"


def read_token() -> str | None:
    """The running instance's token (None if there is none)."""
    try:
        return token_path().read_text().strip() or None
    except OSError:
        return None


def client_environment() -> dict:
    """Variables that make Ray's own clients (`ray job submit`, ray.init) use the token."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path())}


def _answers(address: str) -> bool:
    token = read_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"{address}/api/jobs/", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _ray_executable() -> str:
    candidate = Path(sys.executable).with_name("ray")
    return str(candidate) if candidate.exists() else (shutil.which("ray") or "ray")


def start(num_cpus: int | None = None, timeout: float = 120.0) -> LocalRay:
    """Start a private head on loopback; returns once its job API answers."""
    num_cpus = num_cpus or max(os.cpu_count() or 1, 4)
    gcs, dash, client, agent, agent_grpc, env_agent, metrics = _free_ports(7)
    temp_dir = tempfile.mkdtemp(prefix="orc-", dir="/tmp")
    command = [
        _ray_executable(), "start", "--head", "--block", "--disable-usage-stats",
        "--node-ip-address", "127.0.0.1", "--port", str(gcs), "--temp-dir", temp_dir,
        "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
        "--ray-client-server-port", str(client), "--dashboard-agent-listen-port", str(agent),
        "--dashboard-agent-grpc-port", str(agent_grpc), "--runtime-env-agent-port",
        str(env_agent), "--metrics-export-port", str(metrics),
        "--min-worker-port", "0", "--max-worker-port", "0", "--num-cpus", str(num_cpus),
    ]
    atomic_write(token_path(), secrets.token_hex(32), mode=0o600)  # a new one per instance
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN"}  # would win over the file
    env.update(client_environment())
    # Ray processes that look for "their" cluster (Train's placement-group cleaner does) would
    # find every Ray on the host and give up; point them at this one.
    env["RAY_ADDRESS"] = f"127.0.0.1:{gcs}"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # the job's `python` must be this interpreter (a venv need not be activated to use it)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"  # else SIGTERM waits to drain the node
    log = open(Path(temp_dir) / "ray-start.log", "wb")
    try:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True,
        )
    except OSError as exc:
        raise JobError(f"could not start a local Ray: {exc}",
                       hint='pip install "orchestrate[ray]"') from exc
    finally:
        log.close()
    ray = LocalRay(f"http://127.0.0.1:{dash}", f"127.0.0.1:{gcs}", process.pid, temp_dir, num_cpus)
    deadline = time.monotonic() + timeout
    while not _answers(ray.address):
        if process.poll() is not None or time.monotonic() > deadline:
            tail = _tail(Path(temp_dir) / "ray-start.log")
            stop(ray)
            raise JobError(f"the local Ray did not start:\n{tail}")
        time.sleep(0.5)
    return ray


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop(ray: LocalRay, timeout: float = 30.0) -> None:
    """SIGTERM the head (it stops its children), then SIGKILL what is left of its group."""
    try:
        os.kill(ray.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while _group_alive(ray.pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(ray.pid, os.WNOHANG)
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(ray.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(ray.pid, 0)
    _kill_strays(ray.temp_dir)
    shutil.rmtree(ray.temp_dir, ignore_errors=True)


def _group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().split(")")[-1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                return True
    return False


def _kill_strays(temp_dir: str) -> None:
    """Processes of this Ray that left its group (they name its temp dir on their command line)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if any(temp_dir.encode() + end in cmdline for end in (b"/", b"\0")):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


def _live_users() -> list[Path]:
    users = []
    for path in (_folder() / "users").iterdir():
        pid = path.name.split("-")[0]
        if pid.isdigit() and _alive(int(pid)):
            users.append(path)
        else:
            path.unlink(missing_ok=True)
    return users


def current() -> LocalRay | None:
    """The embedded local Ray if one is up (for `jobs`, `logs`, `stop` without a cluster)."""
    with _locked():
        return _read_record()


@contextlib.contextmanager
def session(num_cpus: int | None = None, keep: bool = False):
    """Use the local Ray for the duration of the block: reuse one that is up, else start one.

    Yields (LocalRay, started). On exit the last user stops it, unless someone asked to keep it.
    """
    me = _folder() / "users" / f"{os.getpid()}-{secrets.token_hex(4)}"  # one per session
    with _locked():
        ray = _read_record()
        started = ray is None
        if started:
            ray = start(num_cpus)
        if keep and not ray.keep:
            ray = LocalRay(**{**asdict(ray), "keep": True})
        _write_record(ray)
        me.touch()
    try:
        yield ray, started
    finally:
        with _locked():
            me.unlink(missing_ok=True)
            ray = _read_record() or ray
            if not ray.keep and not _live_users():
                stop(ray)
                _write_record(None)


def keep_running() -> None:
    """Leave the local Ray up after this session (a job was left running on it)."""
    with _locked():
        ray = _read_record()
        if ray is not None:
            _write_record(LocalRay(**{**asdict(ray), "keep": True}))


def shutdown() -> bool:
    """Stop the embedded local Ray whoever started it; False if none was up."""
    with _locked():
        ray = _read_record()
        if ray is None:
            return False
        stop(ray)
        _write_record(None)
        return True
