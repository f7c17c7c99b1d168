"""Simulated machines: each host is a network namespace with its own address on a bridge the test
made, its own PID namespace (its `ray stop` sees only its own processes), a private `/tmp/ray`,
`/dev/shm` and home folder, its own hostname, `/etc/hosts` and `/etc/resolv.conf`, and its own
sshd (with its own host key) that lets root in with a key made for the test. The cluster file is
then written exactly as a user writes it.

Traffic goes only to these namespaces (10.x addresses on the test's bridge) and loopback. A host
can be killed (every process in it, as when a machine loses power), cut off the network and
restored, and started again; its host key can be changed (as by a reinstall, or by
another machine taking its address). `Network.close()` removes everything the helper made.

Needs root and the tools in tests/prerequisites.py; without them the fixture fails naming what
is missing (it never skips).
"""
from __future__ import annotations

import contextlib
import os
import random
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import stop

PREFIX = "orh"   # every bridge, veth and namespace the helper makes starts with this
MADE: set[str] = set()   # the bridges, veths and namespaces this process made (`leftovers`)
# Every host's login shell exports these, as an /etc/environment line would, unless the host
# is made with `ray_defaults=True`: Ray's autoscaler (the monitor on the head, started by `ray
# start`) looks at the cluster every second instead of every 5 s, so the workers of a `ray up`
# join about 7 s sooner (measured: a 3-host `up` 19 s -> 12 s). The cluster file is untouched;
# what `up` waits for (min_workers alive) is the same. Its load report is refreshed as often,
# which hid a run refused right after `up` (issue 48): tests/cluster/test_cloud_aws.py runs
# `up` then `run`, and a GitOps first apply, on hosts with Ray's defaults.
MACHINE_ENVIRONMENT = {"AUTOSCALER_UPDATE_INTERVAL_S": "1"}
REPO = Path(__file__).resolve().parents[2]


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    """`cmd`'s result; with `check`, a failure raises with what the command said (`ip`'s
    "File exists" and "No such device" both exit 2)."""
    done = subprocess.run(list(cmd), check=False, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()}")
    return done


def _free_tag() -> str:
    """A tag no link of this machine starts with: two networks made at once (the ssh tier's
    two workers, a cloud's instances) never share a bridge's name."""
    links = sh("ip", "-o", "link", "show").stdout
    rng = random.SystemRandom()
    for _ in range(100):
        tag = f"{PREFIX}{rng.randrange(16**4):04x}"
        if f" {tag}" not in links and not Path(f"/run/netns/{tag}h1").exists():
            return tag
    raise RuntimeError("no free tag for a simulated network")


def _free_subnet() -> str:
    """A 10.a.b.0/24 no interface of this machine uses: '10.a.b'."""
    used = sh("ip", "-4", "-o", "addr").stdout
    rng = random.SystemRandom()
    for _ in range(100):
        base = f"10.{rng.randint(100, 250)}.{rng.randint(1, 250)}"
        if f" {base}." not in used:
            return base
    raise RuntimeError("no free 10.x.y.0/24 subnet")


def _venv_bin() -> Path:
    return Path(sys.executable).parent


@dataclass
class Host:
    """One simulated machine. `ip` is its address; `name` its hostname and netns name."""

    network: Network
    index: int
    name: str
    ip: str
    folder: Path
    hostname_resolves_to: str = ""     # what the host's /etc/hosts maps its own name to
    python_first: Path | None = None   # a folder put ahead of Ray's on the login shell's PATH
    environment: dict[str, str] = field(default_factory=dict)   # exported by the login shell
    ray_defaults: bool = False         # no MACHINE_ENVIRONMENT: Ray's intervals as users have them
    authorized_keys: str | None = None  # its own (as cloud-init writes a key pair's), else the network's
    users: tuple[str, ...] = ()        # login names besides root, each uid 0 with root's home
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def veth(self) -> str:
        return f"{self.network.tag}v{self.index}"

    @property
    def host_key(self) -> Path:
        return self.folder / "host_key"

    def fingerprint(self) -> str:
        """`SHA256:...` of the key this host's sshd offers now."""
        return sh("ssh-keygen", "-l", "-f", f"{self.host_key}.pub").stdout.split()[1]

    def change_host_key(self, key: Path | None = None) -> None:
        """Give the host a new host key (or `key`, e.g. its earlier one, kept by the caller) and
        make its sshd take it: SIGHUP re-executes sshd in place (same PID, the host's PID 1), so
        nothing else on the host stops."""
        for suffix in ("", ".pub"):
            Path(f"{self.host_key}{suffix}").unlink(missing_ok=True)
        if key is None:
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key))
        else:
            for suffix in ("", ".pub"):
                shutil.copy(f"{key}{suffix}", f"{self.host_key}{suffix}")
            os.chmod(self.host_key, 0o600)
        wanted = self.fingerprint()
        os.kill(self.init_pid(), 1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:   # the re-executed sshd offers the new key
            done = sh("ssh-keyscan", "-T", "2", "-t", "ed25519", self.ip, check=False)
            offered = [line.split()[-1] for line in done.stdout.splitlines() if line.strip()]
            if offered and Path(f"{self.host_key}.pub").read_text().split()[1] in offered:
                return
            time.sleep(0.1)
        raise RuntimeError(f"sshd of host {self.name} does not offer its new key {wanted}")

    # -- life ---------------------------------------------------------------------------------
    def _prepare(self) -> None:
        home = self.folder / "home"
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self.host_key.exists():   # its own, kept when the host boots again
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key))
        (self.folder / "tmp-ray").mkdir(parents=True, exist_ok=True)
        home.mkdir(parents=True, exist_ok=True)
        (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
        # The login shell's PATH, as on a machine where Ray lives in a venv: the launcher runs
        # `bash --login -c -i 'source ~/.bashrc; ...'`, so this is what Ray's commands see.
        path = f"{_venv_bin()}:$PATH"
        if self.python_first is not None:
            path = f"{self.python_first}:{path}"
        environment = {**({} if self.ray_defaults else MACHINE_ENVIRONMENT), **self.environment}
        exports = [f'export PATH="{path}"'] + [f"export {key}={shlex.quote(value)}"
                                               for key, value in environment.items()]
        (home / ".bashrc").write_text("\n".join(exports) + "\n")
        (home / ".profile").write_text('[ -f ~/.bashrc ] && . ~/.bashrc\n')
        resolves = self.hostname_resolves_to or self.ip
        (self.folder / "hosts").write_text(
            f"127.0.0.1 localhost\n{resolves} {self.name}\n")
        # A LAN's DNS answers at once, if only "no such name". This machine's resolver is not
        # reachable from the test's bridge, where a lookup would wait 10-20 s for nothing
        # (measured: `getent hosts <another host's address>`), and torch's process group looks
        # up every peer's address: on its own loopback, each lookup fails at once instead.
        (self.folder / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        (self.folder / "sshd_config").write_text("\n".join([
            "ListenAddress 0.0.0.0:22",
            f"HostKey {self.host_key}",
            f"PidFile {self.folder / 'sshd.pid'}",
            f"AuthorizedKeysFile {self._authorized_keys_file()}",
            "PermitRootLogin prohibit-password",
            "StrictModes no",
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

    def _authorized_keys_file(self) -> Path:
        if self.authorized_keys is None:
            return self.network.folder / "authorized_keys"
        path = self.folder / "authorized_keys"
        path.write_text(self.authorized_keys.rstrip("\n") + "\n")
        return path

    def _passwd(self) -> list[str]:
        """Mounts giving the host its own /etc/passwd with `users` (a cloud image's `ubuntu`: uid 0
        here, so that what Ray runs as that user may do what root may, as with passwordless sudo)."""
        if not self.users:
            return []
        lines = Path("/etc/passwd").read_text().rstrip("\n").splitlines()
        lines += [f"{user}:x:0:0:{user}:/root:/bin/bash" for user in self.users]
        (self.folder / "passwd").write_text("\n".join(lines) + "\n")
        return [f"mount --bind {self.folder / 'passwd'} /etc/passwd"]

    def start(self) -> None:
        """Boot the host: a fresh PID and mount namespace in its netns, with sshd as its init."""
        self._prepare()
        self.restore()
        home = self.folder / "home"
        binds = []
        # The venv's python may live under /root (pyenv): keep it visible under the new home.
        real_root = Path("/root").resolve()
        for path in {Path(sys.base_prefix), Path(sys.prefix)}:
            if real_root in path.parents:
                top = real_root / path.relative_to(real_root).parts[0]
                (home / top.name).mkdir(exist_ok=True)
                binds.append(f"mount --rbind {top} {home / top.name}")
        script = "; ".join([
            "set -e",
            f"hostname {self.name}",
            "mount --make-rprivate /",
            "mount -t tmpfs tmpfs /dev/shm",   # half the RAM at most, as a real /dev/shm
            "mkdir -p /tmp/ray",
            f"mount --bind {self.folder / 'tmp-ray'} /tmp/ray",
            f"mount --bind {self.folder / 'hosts'} /etc/hosts",
            f"mount --bind {self.folder / 'resolv.conf'} /etc/resolv.conf",
            *self._passwd(),
            *binds,
            f"mount --rbind {home} /root",
            f"exec /usr/sbin/sshd -D -e -f {self.folder / 'sshd_config'}",
        ])
        with open(self.folder / "sshd.log", "ab") as log:
            self.process = subprocess.Popen(
                ["ip", "netns", "exec", self.name, "unshare", "--pid", "--fork", "--kill-child",
                 "--mount", "--uts", "--mount-proc", "--propagation", "private",
                 "sh", "-c", script],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"host {self.name} did not boot: "
                                   f"{(self.folder / 'sshd.log').read_text()}")
            if self.init_pid() is not None and self.in_host(
                    "exec 3<>/dev/tcp/127.0.0.1/22", shell=True, check=False).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"sshd of host {self.name} did not start listening")

    def init_pid(self) -> int | None:
        """This host's PID 1, as the machine sees it (sshd), or None when the host is down."""
        if self.process is None or self.process.poll() is not None:
            return None
        children = sh("pgrep", "-P", str(self.process.pid), check=False).stdout.split()
        return int(children[0]) if children else None

    def kill(self) -> None:
        """Power loss: every process of the host dies at once (its PID 1 is SIGKILLed) and its
        address stops answering, as a machine that is off (not even a TCP reset)."""
        self.cut()
        pid = self.init_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        stop(self.process)
        self.process = None

    def cut(self) -> None:
        """Pull the host's network cable (its link on the bridge goes down)."""
        sh("ip", "link", "set", self.veth, "down")

    def restore(self) -> None:
        sh("ip", "link", "set", self.veth, "up")

    # -- looking inside -----------------------------------------------------------------------
    def in_host(self, *cmd: str, check: bool = True, shell: bool = False,
                timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a command inside the host (its network, PID and mount namespaces)."""
        pid = self.init_pid()
        if pid is None:
            raise RuntimeError(f"host {self.name} is down")
        args = ["nsenter", "-t", str(pid), "-n", "-p", "-m", "-u", "--"]
        args += ["bash", "-c", cmd[0]] if shell else list(cmd)
        return subprocess.run(args, check=check, capture_output=True, text=True, timeout=timeout,
                              env=_in_host_env())

    def spawn(self, *cmd: str) -> subprocess.Popen:
        """Start a command in the host's network and mount namespaces, in the background (the
        caller stops it: it is our child, not in the host's PID namespace, so no fork between)."""
        pid = self.init_pid()
        if pid is None:
            raise RuntimeError(f"host {self.name} is down")
        return subprocess.Popen(["nsenter", "-t", str(pid), "-n", "-m", "-u", "--", *cmd],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=_in_host_env())

    def pids(self, pattern: str = "raylet|gcs_server|ray start|dashboard") -> list[int]:
        """Processes of this host whose command line matches `pattern` (pgrep -f)."""
        if self.init_pid() is None:
            return []
        done = self.in_host("pgrep", "-f", pattern, check=False)
        return [int(p) for p in done.stdout.split()]


@dataclass
class Network:
    """A bridge, the hosts on it, and the key that logs in to them as root."""

    folder: Path
    tag: str
    subnet: str
    hosts: list[Host] = field(default_factory=list)
    client_key: Path = field(init=False)

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @classmethod
    def create(cls, folder: Path, count: int = 3,
               options: dict[int, dict] | None = None) -> Network:
        """`count` hosts; `options[i]` are Host fields for the i-th (from 1), e.g.
        `python_first` or `hostname_resolves_to`."""
        if os.geteuid() != 0:
            raise RuntimeError("simulated hosts need root (network and PID namespaces)")
        for tool in ("ip", "unshare", "nsenter", "/usr/sbin/sshd"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"simulated hosts need {tool} (iproute2, util-linux, "
                                   "openssh-server)")
        folder.mkdir(parents=True, exist_ok=True)
        network = cls(folder=folder, tag=_free_tag(), subnet=_free_subnet())
        try:
            network._make(count, options or {})
        except BaseException:
            network.close()
            raise
        return network

    def _make(self, count: int, host_options: dict) -> None:
        self.client_key = self.folder / "client_key"
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.client_key))
        shutil.copy(self.folder / "client_key.pub", self.folder / "authorized_keys")
        Path("/run/sshd").mkdir(exist_ok=True)
        MADE.add(self.bridge)
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for index in range(1, count + 1):
            self.add_host(**host_options.get(index, {}))

    def add_host(self, ip: str | None = None, folder: Path | None = None, **options) -> Host:
        """A new host (its own namespaces and link) at `ip` (default: the next free .1x address),
        its files in `folder` (default: a new one; an earlier host's gives its host key and home,
        as a machine booting again from its disk)."""
        index = max((host.index for host in self.hosts), default=0) + 1
        host = Host(network=self, index=index, name=f"{self.tag}h{index}",
                    ip=ip or f"{self.subnet}.{10 + index}", folder=folder or self.folder / f"h{index}",
                    **options)
        self.hosts.append(host)
        MADE.update((host.name, host.veth))
        sh("ip", "netns", "add", host.name)
        sh("ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0",
           "netns", host.name)
        sh("ip", "link", "set", host.veth, "master", self.bridge, "up")
        inside = ["ip", "netns", "exec", host.name]
        sh(*inside, "ip", "addr", "add", f"{host.ip}/24", "dev", "eth0")
        sh(*inside, "ip", "link", "set", "eth0", "up")
        sh(*inside, "ip", "link", "set", "lo", "up")
        sh(*inside, "ip", "route", "add", "default", "via", f"{self.subnet}.1")
        host.start()
        return host

    def remove_host(self, host: Host) -> None:
        """Power off `host` and take its namespaces and link away (its folder stays)."""
        with contextlib.suppress(Exception):
            host.kill()
        sh("ip", "link", "delete", host.veth, check=False)
        sh("ip", "netns", "delete", host.name, check=False)
        self.hosts.remove(host)

    def close(self) -> None:
        for host in self.hosts:
            with contextlib.suppress(Exception):
                host.kill()
        for host in self.hosts:
            sh("ip", "link", "delete", host.veth, check=False)
            sh("ip", "netns", "delete", host.name, check=False)
        sh("ip", "link", "delete", self.bridge, check=False)


def _in_host_env() -> dict[str, str]:
    """This environment, with the home folder an SSH login on the host gets (the host's own,
    bound over /root), not the test's temporary one."""
    return {**os.environ, "HOME": "/root"}


def local_cluster(name: str, network: Network) -> dict:
    """cluster_configs/local.yaml as a user adapts it to these hosts: name, addresses and key.
    Nothing else changes: Ray's default start commands, `ssh_user: root`."""
    import yaml

    config = yaml.safe_load((REPO / "cluster_configs" / "local.yaml").read_text())
    config["cluster_name"] = name
    ips = [host.ip for host in network.hosts]
    config["provider"].update(head_ip=ips[0], worker_ips=ips[1:])
    config["auth"] = {"ssh_user": "root", "ssh_private_key": str(network.client_key)}
    config["min_workers"] = config["max_workers"] = len(ips) - 1
    return config


def leftovers() -> list[str]:
    """Namespaces and links this process made that still exist (for the suite's leak check;
    those of another session running beside it are not counted)."""
    if not MADE:
        return []
    names = sh("ip", "netns", "list", check=False).stdout.split()
    links = sh("ip", "-o", "link", check=False).stdout
    found = [n for n in names if n.startswith(PREFIX)]
    found += [part.split("@")[0].rstrip(":") for line in links.splitlines()
              for part in line.split()[1:2] if part.startswith(PREFIX)]
    return sorted(set(found) & MADE)
