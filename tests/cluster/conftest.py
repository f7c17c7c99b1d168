"""Fixtures for real clusters over real SSH to simulated machines (tests/cluster/hosts.py).

    make_machine  (session) factory: fresh hosts (network, PID and mount namespaces, own sshd);
                  make_machine(count=1) for a head alone, where more hosts are not what is
                  tested
    launch(...)   `orchestrate up` of cluster_configs/local.yaml on a machine: a ClusterHandle
    ssh_cluster   (tests/cluster/shared_cluster/conftest.py) one 3-host cluster for the tests
                  in that package, down once the last of them has run

Each host runs Ray's default start commands as root, exactly as on real machines; everything is
torn down (hosts killed, namespaces and links removed) even when a test fails.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests import prerequisites
from tests.moto_server import aws_env, moto_server  # noqa: F401 - fixtures (test_archive_read)

from .hosts import Network, local_cluster

SYSTEM_PYTHON = "/usr/bin/python3"   # Debian's: without Ray or pyarrow


@dataclass
class Machine:
    """A few simulated hosts and the cluster files that reach them."""

    folder: Path
    network: Network

    @property
    def name(self) -> str:
        return self.network.tag

    @property
    def ips(self) -> list[str]:
        return [host.ip for host in self.network.hosts]

    @property
    def hosts(self):
        return self.network.hosts

    @property
    def client_key(self) -> Path:
        return self.network.client_key

    def cluster_config(self, name: str) -> dict:
        return local_cluster(name, self.network)

    def cluster_file(self, name: str, **overrides) -> Path:
        config = self.cluster_config(name)
        config.update(overrides)
        path = self.folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def ray_pids(self, pattern: str = "raylet|gcs_server|ray start|dashboard") -> set[str]:
        """`host:pid` of every process matching `pattern` on any of the hosts."""
        return {f"{host.name}:{pid}" for host in self.hosts for pid in host.pids(pattern)}

    def ray_processes(self, pattern: str = "ray|gcs_server|raylet") -> list[str]:
        """`host: command line` of every process matching `pattern` (for failure messages)."""
        found = []
        for host in self.hosts:
            if host.init_pid() is not None:
                done = host.in_host("pgrep", "-af", pattern, check=False)
                found += [f"{host.name}: {line[:200]}" for line in done.stdout.splitlines()]
        return found

    def accepted_logins(self) -> int:
        """SSH logins accepted so far by all the hosts' sshds."""
        return sum((host.folder / "sshd.log").read_text(errors="replace")
                   .count("Accepted publickey") for host in self.hosts)

    def close(self) -> None:
        self.network.close()


@dataclass
class ClusterHandle:
    """A cluster launched by `orchestrate up`, with its own ORCHESTRATE_HOME."""

    name: str
    file: Path
    home: Path
    machine: Machine
    env: dict = field(repr=False)
    up_output: str = ""       # what `orchestrate up` printed on stderr
    address: str = ""
    token: str = field(default="", repr=False)

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    def cli(self, *args: str, timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
        return orchestrate(self.env, *args, timeout=timeout, **kwargs)

    @contextlib.contextmanager
    def open(self):
        """`orchestrator.reach.endpoint.open_cluster` for this cluster, in this process."""
        from orchestrator.reach.endpoint import open_cluster
        from orchestrator.state import State

        before = os.environ.get("ORCHESTRATE_HOME")
        os.environ["ORCHESTRATE_HOME"] = str(self.home)
        try:
            state = State.here()
            with open_cluster(state.store.read_cluster(self.name), state) as endpoint:
                yield endpoint
        finally:
            if before is None:
                os.environ.pop("ORCHESTRATE_HOME", None)
            else:
                os.environ["ORCHESTRATE_HOME"] = before

    def record(self) -> dict | None:
        path = self.home / "clusters" / self.name / "record.json"
        return json.loads(path.read_text()) if path.exists() else None


def orchestrate(env: dict, *args: str, timeout: float = 900, **kwargs):
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], env=env,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kwargs)


def cli_env(home: Path) -> dict:
    return {**os.environ, "ORCHESTRATE_HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="session")
def make_machine(tmp_path_factory):
    prerequisites.require()  # fails (never skips) naming what is missing
    machines: list[Machine] = []

    def make(count: int = 3, options: dict[int, dict] | None = None) -> Machine:
        folder = tmp_path_factory.mktemp("machine")
        machine = Machine(folder, Network.create(folder / "hosts", count, options))
        machines.append(machine)
        return machine

    yield make
    with contextlib.ExitStack() as stack:  # every machine is closed even if one close fails
        for machine in machines:
            stack.callback(machine.close)


def autoscaler_log(machine: Machine, lines: int = 60) -> str:
    """The end of the head's autoscaler log (Ray's monitor.*, which starts the workers), read
    from the folder bound over the head's /tmp/ray: why a worker did not join."""
    logs = machine.hosts[0].folder / "tmp-ray"
    try:
        session = logs / os.path.basename(os.readlink(logs / "session_latest"))
    except OSError:
        return "(no Ray session on the head)"
    found = []
    for name in ("monitor.log", "monitor.err", "monitor.out"):
        path = session / "logs" / name
        if path.exists():
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            found.append(f"--- head {name}\n" + "\n".join(tail))
    return "\n".join(found) or "(no autoscaler log on the head)"


def launch(machine: Machine, home: Path, name: str, **overrides) -> ClusterHandle:
    file = machine.cluster_file(name, **overrides)
    handle = ClusterHandle(name=name, file=file, home=home, machine=machine, env=cli_env(home))
    # A wait shorter than a test's limit: a worker that never joins is reported ("partial"), with
    # the head autoscaler's account, instead of the test timing out without either.
    done = handle.cli("up", str(file), "-y", "--format", "json", "--wait-timeout", "300")
    if done.returncode != 0:
        raise RuntimeError(f"orchestrate up failed ({done.returncode}):\n{done.stderr}\n"
                           + autoscaler_log(machine))
    result = json.loads(done.stdout)
    handle.up_output = done.stderr
    handle.address = result["address"]
    handle.token = (home / "secrets" / "clusters" / name).read_text().strip()
    return handle


def tear_down(handle: ClusterHandle) -> None:
    if handle.record() is not None:
        handle.cli("down", handle.name, "-y")


def submit_and_wait(address: str, headers: dict, entrypoint: str, timeout: float = 300) -> str:
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(address, headers=headers)
    job = client.submit_job(entrypoint=entrypoint)
    deadline = time.monotonic() + timeout
    while client.get_job_status(job) not in (JobStatus.SUCCEEDED, JobStatus.FAILED,
                                             JobStatus.STOPPED):
        assert time.monotonic() < deadline, "the job did not finish"
        time.sleep(1)
    assert client.get_job_status(job) == JobStatus.SUCCEEDED, client.get_job_logs(job)
    return client.get_job_logs(job)
