"""The `ray_up` launch backend: Ray's cluster launcher (`ray up`, `ray down`, `ray get-head-ip`,
`ray attach`, `ray rsync-up/down`), run as subprocesses; the head reached over SSH (`head`).

The CLI is the stable surface (ray.autoscaler.sdk is a DeveloperAPI). Every line of output goes
to a log file in the cluster's workspace with the token masked; the numbered steps and warnings
go to `progress`. Each run is bounded by a timeout; Ctrl-C or the timeout stops its whole
process group.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

from ... import providers
from ...errors import ClusterError
from ...state import ClusterRecord, State, cluster_key
from ...util import ssh
from ...util.processes import dies_with_parent, handing_signals_to, ray_command, stop_child_group
from ...util.progress import Progress
from ..base import Feature
from . import head, known_hosts, launcher_auth, local_nodes

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \S+\s+(?P<level>[A-Z]+) \S+ -- ")
_STEP = re.compile(r"^\s*(\[\d+/\d+\]|<\d+/\d+>)")
_NEWS = ("Launched a new head node", "Relaunching", "will not be restarted",
         "No nodes remaining", "Requested", "Terminat")

# What ssh prints last when it refuses a host's key (a changed one: util.ssh.host_key_changed).
_REFUSED = "Host key verification failed."

# Known failures, matched against the log, mapped to what to tell the user.
DIAGNOSES = (
    # What is left when Ray hid what ssh said before (the host and both keys: run_ray).
    (_REFUSED, "SSH refused a host's key (it is not the one pinned for it)",
     "`orchestrate known-hosts NAME` shows the pinned keys; --accept HOST pins a new one"),
    ("Permission denied (publickey", "SSH refused the key",
     "check auth.ssh_user and that the public key of auth.ssh_private_key is in the node's "
     "~/.ssh/authorized_keys"),
    ("Connection refused", "nothing accepts SSH connections on a node",
     "check that sshd runs on the node and the address/port are right"),
    ("Connection timed out", "a node does not answer on SSH",
     "check the node's address, its firewall or security group, and that it is running"),
    ("No route to host", "a node cannot be reached", "check the node's address and network"),
    ("Could not resolve hostname", "a node's host name does not resolve", "check the address"),
    ("command not found", "a command is missing on a node",
     "`ray` must be on the login shell's PATH of the node, or named by absolute path"),
)

_NOISE = ("File Mount:", "If you experience issues with the cloud provider", "!!!",
          "Full traceback:", "Exception details:")



def run_ray(args: list[str], *, log_path: Path, progress: Progress, timeout: float,
            env: dict[str, str] | None = None, secrets: Iterable[str] = (),
            cluster: str = "") -> str:
    """Run `ray <args>`; return its output (ANSI removed). Raise ClusterError on failure.

    A host key refused by ssh stops Ray at once (it would retry a node's SSH for minutes, or,
    in `ray down`, go on without it) with a ClusterError naming the host and both keys."""
    secrets = [s for s in secrets if s]
    environment = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1",
                   **(env or {})}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    # Private like the rest of the state folder: the log names hosts, users and key paths.
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with open(fd, "a", buffering=1) as log:
        log.write(f"\n=== ray {' '.join(args)} ({time.strftime('%Y-%m-%d %H:%M:%S')})\n")
        process = subprocess.Popen(
            ray_command(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=environment, text=True, errors="replace",
            start_new_session=True,  # our own Ctrl-C handling stops it; the terminal's does not
            preexec_fn=dies_with_parent(),  # noqa: PLW1509 - one C call in the child
        )
        reader = threading.Thread(target=_pump, daemon=True,
                                  args=(process, log, lines, progress, secrets))
        reader.start()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_child_group(process)
            reader.join(5)
            raise ClusterError(f"`ray {args[0]}` did not finish within {timeout:.0f} s and was "
                               f"stopped", hint=f"full log: {log_path}") from None
        except BaseException:  # Ctrl-C: stop ray too, then let the caller record the state
            stop_child_group(process)
            reader.join(5)
            raise
        reader.join(10)
    output = "\n".join(lines)
    changed = ssh.host_key_changed(output) if _REFUSED in output else None
    if changed is not None:
        raise ClusterError(f"`ray {args[0]}` stopped: {changed}",
                           hint=f"{known_hosts.hint(cluster or '<cluster>', changed.host)}; "
                                f"full log: {log_path}")
    if process.returncode != 0:
        raise ClusterError(f"`ray {args[0]}` failed: {diagnose(output)}",
                           hint=f"full log: {log_path}")
    return output


def diagnose(output: str) -> str:
    for needle, what, hint in DIAGNOSES:
        if needle in output:
            return f"{what} ({hint})"
    said = [line.strip() for line in output.splitlines() if line.startswith("rsync: ")]
    if said:  # rsync's own reason, not Ray's "SSH command failed" after it
        return said[-1].replace("[Receiver] ", "").replace("[sender] ", "")
    meaningful = [line for line in output.splitlines()
                  if line.strip() and not line.lstrip().startswith(("at ", "File "))]
    return meaningful[-1].strip() if meaningful else "no output"


def _pump(process: subprocess.Popen[str], log: IO[str], lines: list[str], progress: Progress,
          secrets: list[str]) -> None:
    assert process.stdout is not None
    for raw in process.stdout:
        line = _ANSI.sub("", raw.rstrip("\n"))
        for secret in secrets:
            line = line.replace(secret, "***")
        log.write(line + "\n")
        match = _PREFIX.match(line)
        text = line[match.end():] if match else line
        lines.append(text)
        if text.strip() == _REFUSED:  # the reason is in `lines`; Ray must not go on without it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        level = match.group("level") if match else ""
        if text.lstrip().startswith(_NOISE):
            continue
        if _STEP.match(text) or level in ("WARN", "WARNING", "ERR", "ERROR") or \
                any(news in text for news in _NEWS):
            progress(f"  {text.strip()}")


class RayUp:
    """The `ray_up` LaunchBackend: `ray up` / `ray down` of one rendered config file, with the
    provider's environment; the head reached over SSH (orchestrator.launch.ray_up.head).

    The launcher's own files (the on-prem provider's node list, config cache, bootstrap temp
    files) live in the cluster's workspace, not in /tmp where other clusters and users meet.
    """

    NAME = "ray-up"
    FEATURES = frozenset({Feature.SHELL_ON_HEAD})
    FORWARD = "an SSH forward"
    VIA = "ssh"

    def __init__(self, state: State, progress: Progress) -> None:
        self.state = state
        self.progress = progress

    @staticmethod
    def teardown_words(name: str, config: Mapping[str, Any],
                       record: Mapping[str, Any]) -> list[str]:
        """`ray down` with the recorded config: its hosts, how it logs in, and the commands the
        config holds (shown, never run by `ray down`)."""
        provider = _mapping(config.get("provider"))
        auth = _mapping(config.get("auth"))
        hosts = [provider.get("head_ip") or record.get("head_ip"),
                 *(provider.get("worker_ips") or [])]
        lines = [f"`ray down` with the state's config: provider {provider.get('type')!r}"
                 + (f", hosts {', '.join(repr(h) for h in hosts if h)}" if any(hosts) else "")]
        lines.append(f"ssh as {auth.get('ssh_user')!r} with key {auth.get('ssh_private_key')!r}"
                     + (f" through the proxy command {auth['ssh_proxy_command']!r}"
                        if auth.get("ssh_proxy_command") else ""))
        docker = _mapping(config.get("docker"))
        if docker.get("container_name"):
            lines.append(f"docker container {docker['container_name']!r}")
        for key in sorted(k for k in config if str(k).endswith("_commands") and config[k]):
            lines.append(f"{key} (recorded, not run by `ray down`): {config[key]!r}")
        return lines

    def _scratch(self, name: str) -> Path:
        return self.state.store.workspace(name) / "launcher"

    def environment(self, name: str, provider: str) -> dict[str, str]:
        """What every `ray` command of this cluster runs with (Ray's own clients included):
        its `ssh` is the one that checks the cluster's pinned host keys (launch.ray_up.known_hosts)."""
        scratch = self._scratch(name)
        pinning = known_hosts.ssh_folder(self.state, name)
        path = {"PATH": f"{pinning}{os.pathsep}{os.environ.get('PATH', os.defpath)}"} \
            if pinning is not None else {}
        return {"RAY_TMPDIR": str(scratch), "TMPDIR": str(scratch), **path,
                **providers.ray_up_site(provider).launcher_env()}

    def _mend(self, name: str, config_file: Path, *, for_teardown: bool) -> None:
        if local_nodes.mend(self._scratch(name), name, config_file, for_teardown=for_teardown):
            self.progress("  the launcher's node list was cut short by an interrupted run; "
                          + ("treating every host as possibly running" if for_teardown
                             else "starting from the hosts in the file"))

    def _secrets(self, name: str) -> list[str]:
        """The cluster's token, masked in every log (none after a very early failure)."""
        try:
            return [self.state.secrets.read(cluster_key(name))]
        except ClusterError:
            return []

    def _log(self, name: str, file: str) -> Path:
        return self.state.store.workspace(name) / file

    def launch(self, name: str, provider: str, config_file: Path, *, restart: bool,
               timeout: float) -> None:
        """`ray up`, its provider settings resolved afresh (the config cache of an earlier run is
        removed first), then the auth Ray's bootstrap resolved kept for our own SSH
        (`launcher_auth.keep`): where the file names no `ssh_private_key`, Ray's AWS and GCP
        bootstraps make a key pair and fill it in, which the file as written does not say."""
        args = ["up", str(config_file), "-y", "--log-style", "record",
                "--log-color", "false"] + ([] if restart else ["--no-restart"])
        self._mend(name, config_file, for_teardown=False)
        scratch = self._scratch(name)
        for stale in scratch.glob(launcher_auth.CONFIG_CACHE):
            stale.unlink(missing_ok=True)
        try:
            run_ray(args, log_path=self._log(name, "up.log"), progress=self.progress,
                    timeout=timeout, env=self.environment(name, provider),
                    secrets=self._secrets(name), cluster=name)
        finally:   # a launch that failed after the bootstrap still made (and named) the key
            launcher_auth.keep(self.state, name)

    def head_address(self, name: str, provider: str, config_file: Path) -> str:
        """The head the config names (on-prem), else `ray get-head-ip`'s answer."""
        named = providers.ray_up_site(provider).head_address(
            self.state.store.read_rendered(name) or {})
        if named:
            return named
        output = run_ray(["get-head-ip", str(config_file)], progress=lambda _: None,
                         log_path=self._log(name, "up.log"), timeout=120,
                         env=self.environment(name, provider), secrets=self._secrets(name),
                         cluster=name)
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        if not lines:
            raise ClusterError("`ray get-head-ip` printed no address")
        return lines[-1]

    def teardown(self, name: str, provider: str, config_file: Path, *, timeout: float) -> None:
        self._mend(name, config_file, for_teardown=True)
        run_ray(["down", str(config_file), "-y", "--log-style", "record", "--log-color", "false"],
                log_path=self._log(name, "down.log"), progress=self.progress, timeout=timeout,
                env=self.environment(name, provider), secrets=self._secrets(name), cluster=name)

    def log_path(self, name: str, action: str) -> Path:
        return self._log(name, f"{action}.log")

    def command(self, action: str, *, in_place: bool = False) -> str:
        return f"`ray {action}`" + (" --no-restart (Ray keeps running on the head)"
                                    if in_place else "")

    def forward(self, record: ClusterRecord, remote_port: int, *, timeout: float,
                local_port: int | None = None, remote_host: str = "127.0.0.1",
                watch: list[subprocess.Popen[str]] | None = None) -> AbstractContextManager[int]:
        """`ssh -N -L` to the head, with the auth `ray up` was given and its pinned host keys."""
        auth = head.auth(record, self.state)
        return _explained(head.forward(auth, str(record.head_ip), remote_port, timeout=timeout,
                                       local_port=local_port, remote_host=remote_host,
                                       watch=watch), auth, record)

    def attach(self, record: ClusterRecord, options: list[str]) -> int:
        """`ray attach` on this terminal (not logged: it is the user's shell); its exit code."""
        head.reach_head(record, self.state)  # Ray would say only "Command failed: <its ssh line>"
        environment = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
                       **self.environment(record.name, record.provider)}
        argv = ray_command("attach", str(self.state.store.rendered_path(record.name)),
                           "--no-config-cache", *options)
        process = subprocess.Popen(argv, env=environment,
                                   preexec_fn=dies_with_parent())  # noqa: PLW1509 - one C call
        with handing_signals_to(process):
            return process.wait()

    def exec(self, record: ClusterRecord, command: str, *, tty: bool | None = None,
             in_container: bool = True) -> int:
        """Not `ray exec`, whose exit code is 1 on any failure: `head.run_on_head`."""
        return head.run_on_head(record, self.state, command, tty=tty, in_container=in_container)

    def output(self, record: ClusterRecord, command: str, *, timeout: float) -> str:
        """One plain ssh to the head with its pinned key (`command` quoted by the caller)."""
        try:
            return ssh.run(head.auth(record, self.state), str(record.head_ip), command,
                           timeout=timeout, login_shell=False)
        except ssh.HostKeyChanged as exc:
            raise ClusterError(str(exc), hint=known_hosts.hint(record.name, exc.host)) from None
        except ssh.SshError as exc:
            raise ClusterError(f"on the head {record.head_ip}: {exc}") from None

    def rsync(self, record: ClusterRecord, *, down: bool, source: str, target: str,
              all_nodes: bool = False) -> None:
        """`ray rsync-up` / `ray rsync-down`; ClusterError (naming the log) if it fails."""
        verb = "rsync-down" if down else "rsync-up"
        args = [verb, str(self.state.store.rendered_path(record.name)), source, target,
                "--log-style", "record", "--log-color", "false"] + \
            (["--all-nodes"] if all_nodes else [])
        run_ray(args, log_path=self._log(record.name, "rsync.log"), progress=self.progress,
                timeout=3600, env=self.environment(record.name, record.provider),
                secrets=self._secrets(record.name), cluster=record.name)


@contextlib.contextmanager
def _explained(forward: AbstractContextManager[int], auth: dict[str, object],
               record: ClusterRecord) -> Iterator[int]:
    """The forward; if ssh refused the head's key while opening it, the ClusterError names the
    host and both keys (asked again over one plain connection: the forward's ssh said only
    "Host key verification failed")."""
    with contextlib.ExitStack() as stack:
        try:
            port = stack.enter_context(forward)
        except ClusterError as exc:
            if "Host key verification failed" not in exc.message:
                raise
            try:
                ssh.run(auth, str(record.head_ip), "true", timeout=20, login_shell=False)
            except ssh.HostKeyChanged as changed:
                raise ClusterError(str(changed),
                                   hint=known_hosts.hint(record.name, changed.host)) from None
            except ssh.SshError:
                pass
            raise
        yield port


def _mapping(value: Any) -> Mapping[str, Any]:
    """A state's value where a mapping belongs (state is data: it may hold anything)."""
    return value if isinstance(value, Mapping) else {}
