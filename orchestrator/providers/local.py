"""`local`: on-premise hosts over SSH (Ray's on-prem provider), all it needs from orchestrate.

The hosts exist already: the file names them (provider.head_ip, provider.worker_ips), Ray builds
the single node type itself, and `ray down` stops Ray on the head only, so `after_down` stops it
on the workers over SSH. The token never crosses the LAN in clear: the dashboard and job API
bind the head's loopback and are reached through an SSH forward, as on clouds (a
`--dashboard-host` elsewhere is refused), and Ray's gRPC between the hosts runs with TLS, the
node certificate naming the hosts the file gives (`tls_names`; none with a coordinator, whose
hosts are known only at launch).
Preflight: each host answers on SSH with the configured user and key, with the same `ssh`
client and options Ray's command runner uses, in parallel, each bounded by a short timeout.
"""
from __future__ import annotations

import ipaddress
import os
import re
import shlex
from pathlib import Path
from typing import Any

from .. import cluster_settings
from ..errors import Problem
from ..util.progress import Progress
from ..yamlload import Document
from .base import OK, WARN, CheckResult, Checks, ClusterView, Config, FieldPath, NodePrice

NAME = "local"
EXTRA = None
LAUNCH = "ray-up"
# Provider fields Ray's on-prem provider reads.
KEYS = ("head_ip", "worker_ips", "coordinator_address", "external_head_ip")
# head_ip and worker_ips, unless a coordinator_address hands out the hosts (checked in `problems`).
REQUIRED: tuple[str, ...] = ()
HOSTS = ("head_ip", "worker_ips")
REPLACE_FIELDS = ("provider.head_ip",)
SCALING_FIELDS = ("provider.worker_ips",)  # the head's autoscaler reads the new list
FIXED_HOSTS = True   # the listed hosts are all there is
INSTANCE_TYPED = False
# Ray's on-prem provider still reads a top-level min_workers (prepare_local); checked below.
LEGACY_KEYS = ("min_workers",)
# Ray's prepare_local replaces these with its single node type (it aborts on non-empty node types).
RAY_REPLACES = ("available_node_types", "head_node_type")
# Ray's defaults (ray/autoscaler/local/defaults.yaml).
DEFAULT_START = (
    ("ray stop", "ulimit -c unlimited; ray start --head --port=6379"
     " --autoscaling-config=~/ray_bootstrap_config.yaml"),
    ("ray stop", "ray start --address=$RAY_HEAD_IP:6379"),
)
# Ray's on-prem provider builds its single node type itself and aborts on these.
FORBIDDEN = ("available_node_types", "head_node_type", "head", "workers")
TIMEOUT = int(os.environ.get("ORCHESTRATE_SSH_TIMEOUT", "5"))


def problems(doc: Document, data: Config) -> list[Problem]:
    found = [doc.problem((key,), f"'{key}' is not supported by the local provider",
                         "its nodes are the hosts in provider.head_ip and provider.worker_ips; "
                         "use min_workers/max_workers at the top level")
             for key in FORBIDDEN if key in data]
    value = data.get("min_workers")
    if "min_workers" in data and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 0):
        found.append(doc.problem(("min_workers",), "expected an integer >= 0"))
    provider = data.get("provider") or {}
    if "coordinator_address" in provider:  # Ray's prepare_coordinator: the coordinator has the hosts
        if "max_workers" not in data:
            found.append(doc.problem(("max_workers",), "missing 'max_workers', required with "
                                     "provider.coordinator_address (the most hosts to ask for)"))
    else:
        found += [doc.problem(("provider", key), f"missing '{key}', required for provider type "
                              f"{NAME}", "or give provider.coordinator_address")
                  for key in HOSTS if provider.get(key) in (None, "")]
    found += _worker_bounds(doc, data, provider)
    found += _exposed_dashboard(doc, data)
    for key in ("head_ip", "worker_ips"):
        values = provider.get(key)
        values = [values] if isinstance(values, str) else values or []
        for i, host in enumerate(values):
            where: FieldPath = ("provider", key) if key == "head_ip" else ("provider", key, i)
            if not isinstance(host, str) or not _is_host(host):
                found.append(doc.problem(where, f"'{host}' is not an IP address or host name"))
    return found


_DASHBOARD_HOST = re.compile(r"(?:^|\s)--dashboard-host(?:=|\s+)(\S+)")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _exposed_dashboard(doc: Document, data: Config) -> list[Problem]:
    """A head start command that binds the dashboard off the head's loopback: the job API and
    the cluster's token would travel the LAN in clear (plain HTTP)."""
    found = []
    commands = data.get("head_start_ray_commands")
    for i, command in enumerate(commands if isinstance(commands, list) else []):
        for host in exposed_dashboard_hosts(str(command)):
            found.append(doc.problem(
                ("head_start_ray_commands", i),
                f"--dashboard-host={host} would expose the dashboard and job API on the "
                "network, where the cluster's token travels in clear (plain HTTP)",
                "remove the option: on-prem, orchestrate binds the dashboard to the head's "
                "loopback and reaches it through an SSH forward; `orchestrate dashboard` "
                "opens it in a browser"))
    return found


def exposed_dashboard_hosts(command: str) -> list[str]:
    """The --dashboard-host values of a start command that are not loopback."""
    found = []
    for match in _DASHBOARD_HOST.finditer(command):
        try:
            host = (shlex.split(match.group(1)) or [""])[0]
        except ValueError:
            host = match.group(1)
        if host not in LOOPBACK:
            found.append(host)
    return found


def _worker_bounds(doc: Document, data: Config, provider: Config) -> list[Problem]:
    """Ray's on-prem launcher defaults min_workers to the number of worker_ips (capped there)
    and refuses a max_workers below it (ray/autoscaler/_private/local/config.py)."""
    ips = provider.get("worker_ips")
    top, least = data.get("max_workers"), data.get("min_workers")
    if not isinstance(ips, list) or not isinstance(top, int) or isinstance(top, bool):
        return []
    if least is None:
        least = len(ips)
    if not isinstance(least, int) or isinstance(least, bool):
        return []
    least = min(least, len(ips))
    if top >= least:
        return []
    given = "" if "min_workers" in data else \
        f"Ray makes min_workers the number of worker_ips ({len(ips)}) when it is not given; "
    return [doc.problem(("max_workers",), f"max_workers {top} is below min_workers {least}",
                        f"{given}set min_workers no higher than max_workers")]


def _is_host(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    labels = text.split(".")
    return all(label and len(label) <= 63 and label.replace("-", "").isalnum()
               and not label.startswith("-") for label in labels) and len(text) <= 253


def group_problems(doc: Document, path: FieldPath, group: Config) -> list[Problem]:
    # Unreachable through the schema today (FORBIDDEN refuses head/workers first); kept so the
    # shorthand's contract holds for every provider.
    if "instance_type" in group:
        return [doc.problem(path + ("instance_type",),
                            "the local provider has no instance types; remove it")]
    return []


def node_config(group: Config) -> Config:
    return {}


NODE_TYPE = "local.cluster.node"   # Ray's name for the on-prem provider's one node type


def price_layout(config: Config) -> Config:
    """The hosts as one node type: the head, and workers up to the listed hosts (Ray's
    min_workers defaults to their number); with a coordinator, up to max_workers."""
    ips = (config.get("provider") or {}).get("worker_ips")
    top = config.get("max_workers")
    most = len(ips) if isinstance(ips, list) else int(top or 0)
    if isinstance(top, int):
        most = min(most, top)
    least = config.get("min_workers")
    least = most if not isinstance(least, int) else min(least, most)
    return {"head_node_type": NODE_TYPE, "max_workers": most, "available_node_types": {
        NODE_TYPE: {"min_workers": least, "max_workers": most}}}


def node_price(config: Config, name: str, node_type: Config) -> NodePrice:
    return NodePrice(name, "host", "", False, cluster_settings.host_price(config))


def price_warning(config: Config, name: str, node_type: Config) -> str | None:
    return None


def price_source(config: Config) -> str:
    return "prices given in the file"


def dashboard_host(config: Config, chosen: str | None) -> str:
    """The head's loopback, reached through an SSH forward (another choice is refused by
    `problems`): the job API over plain HTTP on the LAN would carry the token in clear."""
    return "127.0.0.1"


def tls_names(config: Config) -> tuple[str, ...]:
    if (config.get("provider") or {}).get("coordinator_address"):
        return ()  # the coordinator hands out the hosts at launch
    return tuple(host for host, _ in hosts(config))


def head_address(config: Config) -> str | None:
    head = (config.get("provider") or {}).get("head_ip")
    return str(head) if head else None  # with a coordinator: ask `ray get-head-ip`


def expected_nodes(config: Config) -> int:
    provider = config.get("provider") or {}
    workers = len(provider.get("worker_ips") or [])
    for key in ("min_workers", "max_workers"):
        if isinstance(config.get(key), int):
            workers = min(workers, config[key])
    return 1 + workers


def hosts(config: Config) -> list[tuple[str, str]]:
    """(address, role) of every host the file names: the head first, then the workers."""
    provider = config.get("provider") or {}
    found = [(str(provider["head_ip"]), "the head")] if provider.get("head_ip") else []
    return found + [(str(ip), "worker") for ip in provider.get("worker_ips") or []]


def not_joined(config: Config, node_ips: tuple[str, ...]) -> list[str]:
    import socket

    def address(host: str) -> str:
        try:
            return socket.gethostbyname(host)
        except OSError:
            return host

    return [host for host, _ in hosts(config) if address(host) not in node_ips]


def launcher_env() -> dict[str, str]:
    return {
        # Measured with Ray 2.60: autoscaler v2 on a local (on-premise) cluster marks the head's
        # own entry terminated and launches only one of the workers; v1 launches them all.
        "RAY_UP_enable_autoscaler_v2": os.environ.get("RAY_UP_enable_autoscaler_v2", "0"),  # noqa: SIM112 - Ray's own spelling
        # The hosts exist already: do not wait Ray's default 15 minutes for SSH.
        "AUTOSCALER_NODE_START_WAIT_S": os.environ.get("AUTOSCALER_NODE_START_WAIT_S", "60"),
    }


# Any process `ray stop` would end (Ray's RAY_PROCESSES, ray/autoscaler/_private/constants.py),
# or a `ray start` in flight, as a pgrep pattern; `[r]` so that it does not find the shell that
# runs it.
ANY_RAY = ("[r]aylet|[g]cs_server|[p]lasma_store|[r]ay::|[r]ay start|[d]efault_worker[.]py|"
           "[s]etup_worker[.]py|[m]onitor[.]py|[d]ashboard/|[r]untime_env/agent|"
           "[r]ay[.]util[.]client[.]server|[r]ay_process_reaper|[i]o[.]ray[.]runtime")
# Stop Ray on a host. The head is down by now, so a worker's raylet cannot leave gracefully and
# would sit out `ray stop`'s 16 s grace period: 3 s, then it is killed. A worker the head's
# autoscaler was still starting may come up after that `ray stop`: if a `ray start` (the shell
# running it names it too) or a raylet is found then, end it and stop again. Nothing of Ray's
# running (the head after `ray down`, a host Ray never started on): a second look 3 s later for
# a start on its way, and no `ray stop` if none, which costs a Python start and Ray's import
# (about 1.3 CPU-s). `busy` counts a missing pgrep as busy: such a host gets both stops. Only
# this login's processes are looked for (a `ray stop` by root would also end other users').
STARTING = "[r]ay start|[r]aylet|[g]cs_server"
STOP_RAY = (
    'busy() { pgrep -u "$(id -u)" -f "$1" >/dev/null 2>&1; [ $? -ne 1 ]; }; '
    f"busy '{ANY_RAY}' || {{ sleep 3; busy '{STARTING}' || exit 0; }}; "
    f"ray stop --grace-period 3; busy '{STARTING}' || exit 0; "
    'pkill -u "$(id -u)" -f "[r]ay start"; sleep 2; ray stop --force')


def after_down(config: Config, progress: Progress) -> list[str]:
    """`ray down` stops Ray on the head only, and not even there when the head never became
    up-to-date (a failed `up`: Ray then finds no head to run `ray stop` on). So: every host."""
    from concurrent.futures import ThreadPoolExecutor

    from ..util import ssh

    auth = config.get("auth") or {}
    named = hosts(config)

    def stop(host: tuple[str, str]) -> str | None:
        ip, role = host
        try:
            # A host that takes no TCP connection in 5 s is off (hosts on a LAN answer in ms).
            ssh.run(auth, ip, STOP_RAY, timeout=90, connect_timeout=5)
        except ssh.HostKeyChanged:   # not a host that is off: `down` stops (cluster.apply)
            raise
        except ssh.SshError as exc:
            return f"could not stop Ray on {role} {ip}: {exc}"
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(named)))) as pool:
        return [problem for problem in pool.map(stop, named) if problem]


def credentials() -> CheckResult:
    import shutil

    ssh = shutil.which("ssh")
    if ssh:
        return CheckResult("local ssh", OK, f"ssh client at {ssh}")
    return CheckResult("local ssh", WARN, "no ssh client on PATH", "install openssh-client")


# What the host's own name resolves to, on the host (IPv4: getent would ask DNS for IPv6 first):
# its name, then getent's first line, which starts with the address.
RESOLVE_HOSTNAME = 'name=$(hostname); echo "$name $(getent ahostsv4 "$name" | head -n 1)"'


def _answers(host: str, auth: Config) -> tuple[bool, str, str | None]:
    """Whether `host` takes our SSH login (and why not), and the loopback address its own
    hostname resolves to there, if it does."""
    from ..util import ssh

    try:
        printed = ssh.run(auth, host, RESOLVE_HOSTNAME, timeout=TIMEOUT + 5,
                          connect_timeout=TIMEOUT, login_shell=False)
    except ssh.SshError as exc:
        return False, str(exc), None
    words = printed.split()
    loopback = f"{words[0]} -> {words[1]}" if len(words) > 1 and words[1].startswith("127.") \
        else None
    return True, "answers on SSH", loopback


def check(spec: ClusterView) -> list[CheckResult]:
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    checks = Checks(spec)
    provider = spec.document.get("provider") or {}
    auth = spec.document.get("auth") or {}
    user, key = auth.get("ssh_user"), auth.get("ssh_private_key", "")
    if not user:
        checks.fail("ssh user", "auth.ssh_user is not set", "set the login user of the hosts", ("auth",))
    if not key:
        checks.fail("ssh key", "auth.ssh_private_key is not set",
                    "set the private key that logs in to every host", ("auth",))
    else:   # a relative key starts at the cluster file's folder, as when rendered for `ray up`
        key = str(Path(spec.path).parent / Path(str(key)).expanduser())
        auth = {**auth, "ssh_private_key": key}
        if not os.path.isfile(key):
            checks.fail("ssh key", f"{key} does not exist", "point it at an existing private key",
                        ("auth", "ssh_private_key"))
    if checks.failed:
        return checks.results
    targets: list[tuple[FieldPath, Any]] = [(("provider", "head_ip"), provider.get("head_ip"))]
    targets += [(("provider", "worker_ips", i), ip) for i, ip in enumerate(provider.get("worker_ips") or [])]
    targets = [(path, ip) for path, ip in targets if ip]
    if not targets:
        checks.fail("hosts", "no hosts: provider.head_ip is not set", "set provider.head_ip", ("provider",))
        return checks.results
    if not shutil.which("ssh"):
        checks.fail("ssh", "no ssh client on PATH", "install openssh-client")
        return checks.results
    with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
        answers = list(pool.map(lambda item: _answers(item[1], auth), targets))
    for (path, ip), (ok, detail, loopback) in zip(targets, answers, strict=True):
        if ok:
            checks.ok("ssh", f"{user}@{ip} {detail}", path)
            if loopback:
                checks.warn("hostname", f"{ip}: its own hostname resolves to loopback "
                            f"({loopback}); torch's Gloo and NCCL would take that address",
                            "orchestrate's jobs set GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME to the "
                            "interface of the node's Ray address, but other programs will not: "
                            "map the hostname to the host's network address in its /etc/hosts",
                            path)
        else:
            checks.fail("ssh", f"{user}@{ip}: {detail}",
                        f"check that sshd runs on {ip}, that {user} exists there and that the "
                        f"public key of {key} is in its authorized_keys", path)
    return checks.results


def location(config: Config) -> str:
    coordinator = (config.get("provider") or {}).get("coordinator_address")
    return f"the coordinator at {coordinator}" if coordinator else "the hosts of the file"


def bootstrap_key(config: Config) -> str | None:
    """None: the hosts' key is the one the file names."""
    return None
