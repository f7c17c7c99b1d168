"""Test helpers that build a small "data centre" on this host: a unix user for the Ray nodes,
a Python that user can run, and an sshd listening on port 22 of a few loopback addresses.

Every helper returns an object with `close()` that undoes exactly what it did (kills only the
processes it started or that run as its own user), so tests never touch other Ray instances.
"""
from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import stop

REPO = Path(__file__).resolve().parents[2]


def free_loopback_ips(count: int) -> list[str]:
    """`count` addresses 127.A.B.1.. with nothing listening on port 22 (all are this machine)."""
    rng = random.SystemRandom()
    for _ in range(50):
        base = f"127.{rng.randint(20, 250)}.{rng.randint(1, 250)}"
        ips = [f"{base}.{i}" for i in range(1, count + 1)]
        if all(_port_free(ip, 22) for ip in ips):
            return ips
    raise RuntimeError("no free loopback addresses found")


def free_ports(count: int) -> list[int]:
    socks, ports = [], []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind(("0.0.0.0", 0))
            socks.append(s)
            port = s.getsockname()[1]
            if port < 60000 and port not in ports:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def free_port_block(count: int) -> int:
    """A base port such that base .. base+count-1 are all free."""
    rng = random.SystemRandom()
    for _ in range(200):
        base = rng.randrange(20000, 50000)
        if all(_port_free("0.0.0.0", base + i) for i in range(count)):
            return base
    raise RuntimeError("no free block of ports")


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kwargs)


@dataclass
class NodeUser:
    """A dedicated unix user the Ray nodes run as: `ray stop` as that user stops only them."""

    name: str
    home: Path
    python: str          # a python this user can execute, seeing the project's site-packages
    bin_dir: Path        # holds `python` and `ray` for the user
    uid: int = 0

    @classmethod
    def create(cls) -> NodeUser:
        name = f"orch{random.SystemRandom().randrange(16**6):06x}"
        # "*" (not the default "!"): no password, yet not locked, so sshd lets keys in.
        run(["useradd", "--create-home", "--shell", "/bin/bash", "--password", "*", name])
        home = Path(f"/home/{name}")
        user = cls(name=name, home=home, python="", bin_dir=home / "venv" / "bin")
        user.uid = int(run(["id", "-u", name]).stdout)
        try:
            user._make_python()
        except BaseException:
            user.close()
            raise
        return user

    def _make_python(self) -> None:
        # The project's venv python may live under /root (0700): build a venv for the user from
        # a system python of the same minor version that sees the project's site-packages.
        minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
        base = shutil.which(minor, path="/usr/local/bin:/usr/bin:/bin")
        if base is None:
            raise RuntimeError(f"no system {minor} for the Ray node user")
        venv = self.bin_dir.parent
        self.as_user([base, "-m", "venv", "--without-pip", str(venv)])
        site = sysconfig.get_paths()["purelib"]
        pth = next(venv.glob("lib/python*/site-packages"))
        (pth / "orchestrate-parent.pth").write_text(f"import site; site.addsitedir({site!r})\n")
        ray = self.bin_dir / "ray"
        ray.write_text(f"#!{self.bin_dir / 'python'}\nfrom ray.scripts.scripts import main\nmain()\n")
        ray.chmod(0o755)
        self.python = str(self.bin_dir / "python")
        # Login shells (how the launcher runs commands) find this python and ray first.
        with open(self.home / ".bashrc", "a") as rc:
            rc.write(f'\nexport PATH="{self.bin_dir}:$PATH"\n')
        run(["chown", "-R", f"{self.name}:{self.name}", str(self.home)])

    def as_user(self, cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
        return run(["runuser", "-u", self.name, "--", *cmd], **kwargs)

    def pids(self) -> set[int]:
        out = subprocess.run(["pgrep", "-u", str(self.uid)], capture_output=True, text=True)
        return {int(p) for p in out.stdout.split()}

    def ray_pids(self, pattern: str = "raylet|gcs_server|ray start|dashboard") -> set[int]:
        out = subprocess.run(["pgrep", "-u", str(self.uid), "-f", pattern],
                             capture_output=True, text=True)
        return {int(p) for p in out.stdout.split()}

    def kill_all(self) -> None:
        for sig in ("TERM", "KILL"):
            subprocess.run(["pkill", f"-{sig}", "-u", str(self.uid)], capture_output=True)
            deadline = time.monotonic() + 10
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.2)

    def close(self) -> None:
        self.kill_all()
        subprocess.run(["userdel", "--remove", self.name], capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)


@dataclass
class Sshd:
    """Our own sshd on port 22 of the given loopback addresses, with keys made for the test."""

    ips: list[str]
    folder: Path
    client_key: Path = field(init=False)
    log: Path = field(init=False)
    process: subprocess.Popen | None = None

    @classmethod
    def start(cls, ips: list[str], folder: Path, user: NodeUser) -> Sshd:
        sshd = cls(ips=ips, folder=folder)
        folder.mkdir(parents=True, exist_ok=True)
        sshd.client_key = folder / "client_key"
        sshd.log = folder / "sshd.log"
        host_key = folder / "host_key"
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)])
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(sshd.client_key)])
        ssh_dir = user.home / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        (ssh_dir / "authorized_keys").write_text((folder / "client_key.pub").read_text())
        run(["chown", "-R", f"{user.name}:{user.name}", str(ssh_dir)])
        os.chmod(ssh_dir / "authorized_keys", 0o600)
        config = folder / "sshd_config"
        config.write_text("\n".join([
            *(f"ListenAddress {ip}:22" for ip in ips),
            f"HostKey {host_key}",
            f"PidFile {folder / 'sshd.pid'}",
            f"AllowUsers {user.name}",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "UsePAM no",
            "LogLevel VERBOSE",
            "MaxStartups 100",
            "MaxSessions 100",
            "AllowTcpForwarding yes",
            "",
        ]))
        Path("/run/sshd").mkdir(exist_ok=True)
        with open(sshd.log, "ab") as log:
            sshd.process = subprocess.Popen(
                ["/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
                stdout=log, stderr=subprocess.STDOUT,
            )
        try:
            sshd._wait_listening()
        except BaseException:  # the caller never gets the object: stop sshd here
            sshd.close()
            raise
        return sshd

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited: {self.log.read_text()}")
            if all(not _port_free(ip, 22) for ip in self.ips):
                return
            time.sleep(0.1)
        raise RuntimeError("sshd did not start listening")

    def accepted_logins(self) -> int:
        """How many SSH logins sshd has accepted so far (its log says "Accepted publickey")."""
        return self.log.read_text(errors="replace").count("Accepted publickey")

    def close(self) -> None:
        stop(self.process)


def local_cluster_config(name: str, ips: list[str], user: NodeUser, key: Path) -> dict:
    """A Ray cluster config (Ray's dialect) for a local-provider cluster on loopback addresses.

    All nodes run as `user` on this host, so each node gets its own --temp-dir and ports, and
    the worker start commands stop only their own node (`ray stop` would stop the head too).
    The node on 127.a.b.k gets the dashboard agent port agent_base + k.
    """
    gcs, dashboard, client = free_ports(3)
    agent_base = free_port_block(len(ips) + 1)
    tmp = f"/tmp/{user.name}"
    node = (f'NODE_IP=$(echo "$SSH_CONNECTION" | cut -d" " -f3); '
            f'AGENT_PORT=$(({agent_base} + ${{NODE_IP##*.}})); '
            f'mkdir -p {tmp}/$NODE_IP; export RAY_TMPDIR={tmp}/$NODE_IP; ')
    common = (f"--node-ip-address=$NODE_IP --temp-dir={tmp}/$NODE_IP "
              "--dashboard-agent-listen-port=$AGENT_PORT --num-cpus=2")
    return {
        "cluster_name": name,
        "provider": {"type": "local", "head_ip": ips[0], "worker_ips": ips[1:]},
        "auth": {"ssh_user": user.name, "ssh_private_key": str(key)},
        "max_workers": len(ips) - 1,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 5,
        "head_start_ray_commands": [
            "ray stop",  # as the dedicated user: stops this cluster's processes, nothing else
            node + f"ray start --head --port={gcs} --dashboard-port={dashboard} "
            f"--ray-client-server-port={client} --autoscaling-config=~/ray_bootstrap_config.yaml "
            + common,
        ],
        "worker_start_ray_commands": [
            node + f'pkill -u "$(id -u)" -f "[-]-temp-dir={tmp}/$NODE_IP" || true',
            node + f"ray start --address={ips[0]}:{gcs} " + common,
        ],
    }
