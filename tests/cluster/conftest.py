"""Fixtures for real clusters over real SSH on this host.

    ssh_cluster   (session) a running 3-node `local` cluster launched with `orchestrate up`:
                  .address, .headers, .token, .name, .file, .env, .cli(...), .open()
    make_machine  (session) factory: a fresh node user + sshd on 3 free loopback addresses

Each machine has its own unix user (so `ray stop` run by its nodes touches only them), its own
sshd and keys, and is torn down (processes killed, user removed) even when a test fails.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from .machine import NodeUser, Sshd, free_loopback_ips, local_cluster_config


@dataclass
class Machine:
    folder: Path
    ips: list[str]
    user: NodeUser
    sshd: Sshd

    def cluster_file(self, name: str, **overrides) -> Path:
        config = local_cluster_config(name, self.ips, self.user, self.sshd.client_key)
        config.update(overrides)
        path = self.folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.user.kill_all()
        self.sshd.close()
        self.user.close()
        shutil.rmtree(f"/tmp/{self.user.name}", ignore_errors=True)


@dataclass
class ClusterHandle:
    """A cluster launched by `orchestrate up`, with its own ORCHESTRATE_HOME."""

    name: str
    file: Path
    home: Path
    machine: Machine
    env: dict = field(repr=False)
    address: str = ""
    token: str = field(default="", repr=False)

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    def cli(self, *args: str, timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
        return orchestrate(self.env, *args, timeout=timeout, **kwargs)

    @contextlib.contextmanager
    def open(self):
        """`orchestrator.endpoint.open_cluster` for this cluster, in this process."""
        from orchestrator.endpoint import open_cluster
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
    if os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists():
        if os.environ.get("CI"):  # scripts/setup.sh installs sshd and CI runs as root
            pytest.fail("CI must run the SSH cluster tests: needs root and /usr/sbin/sshd")
        pytest.skip("needs root and openssh-server: creates a unix user, runs sshd on :22")
    machines: list[Machine] = []

    def make() -> Machine:
        folder = tmp_path_factory.mktemp("machine")
        folder.chmod(0o755)
        ips = free_loopback_ips(3)
        user = NodeUser.create()
        try:
            sshd = Sshd.start(ips, folder / "sshd", user)
        except BaseException:
            user.close()
            raise
        machine = Machine(folder, ips, user, sshd)
        machines.append(machine)
        return machine

    yield make
    with contextlib.ExitStack() as stack:  # every machine is closed even if one close fails
        for machine in machines:
            stack.callback(machine.close)


def launch(machine: Machine, home: Path, name: str, **overrides) -> ClusterHandle:
    file = machine.cluster_file(name, **overrides)
    handle = ClusterHandle(name=name, file=file, home=home, machine=machine, env=cli_env(home))
    done = handle.cli("up", str(file), "-y", "--format", "json")
    if done.returncode != 0:
        raise RuntimeError(f"orchestrate up failed ({done.returncode}):\n{done.stderr}")
    result = json.loads(done.stdout)
    handle.address = result["address"]
    handle.token = (home / "secrets" / "clusters" / name).read_text().strip()
    return handle


def tear_down(handle: ClusterHandle) -> None:
    if handle.record() is not None:
        handle.cli("down", handle.name, "-y")


@pytest.fixture(scope="session")
def ssh_cluster(make_machine, tmp_path_factory):
    """A running local-provider cluster: head + 2 workers on loopback, token auth on."""
    machine = make_machine()
    home = tmp_path_factory.mktemp("orchestrate-home")
    name = f"t-{machine.user.name}"
    handle = None
    try:
        handle = launch(machine, home, name)
        yield handle
    finally:
        if handle is not None:
            tear_down(handle)
        else:
            orchestrate(cli_env(home), "down", name, "-y")
