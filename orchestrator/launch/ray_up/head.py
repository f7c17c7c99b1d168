"""The head of a `ray up` cluster over SSH: the port forward (`ssh -N -L` to a Unix socket,
behind a relay we hold: `forward`) and `exec`.

`exec` is written by hand: `ray exec` ends with exit code 1 whatever the remote command returned
(its command runner turns every failure into one ClickException), and a script needs the remote
code. So `exec` runs the line Ray's command runner would run (`bash --login -c -i 'source
~/.bashrc; ... && (CMD)'`, inside the container when the config has `docker:`) over the same ssh
options we use elsewhere, and returns ssh's exit code, which is the remote command's (255: ssh
itself failed).
"""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from typing import IO, Any

from ...errors import ClusterError, KeyRefused
from ...state import ClusterRecord, State
from ...util import http, processes, ssh
from ...util.processes import dies_with_parent, handing_signals_to, stop_child_group
from ...util.relay import Relay
from ...util.waiting import poll
from . import known_hosts, launcher_auth

# What `bash -i` says on stderr when it has no terminal; noise to a script, so left out.
_NO_TTY_NOISE = (b"bash: cannot set terminal process group", b"bash: no job control in this shell")


def rendered(record: ClusterRecord, state: State) -> dict[str, Any]:
    """The Ray cluster config `ray up` was given for `record` (its auth reaches the head)."""
    config = state.store.read_rendered(record.name)
    if config is None:
        raise ClusterError(f"cluster {record.name!r} has no rendered config "
                           f"({state.store.rendered_path(record.name)})")
    return config


def auth(record: ClusterRecord, state: State) -> dict[str, Any]:
    """The auth section `ray up` was given, completed by what Ray's bootstrap filled in (the key
    pair it made where the file names no `ssh_private_key`: `launcher_auth`; where this
    machine never launched it, the running head's key pair if its key file is here), with the
    cluster's pinned host keys: what every connection of ours to its hosts uses."""
    config = rendered(record, state)
    given = dict(config.get("auth") or {})
    if not given.get("ssh_private_key"):
        kept = launcher_auth.read(state, record.name) or \
            launcher_auth.found(state, record.name, config)
        given.update({key: value for key, value in kept.items()
                      if key not in given or key == "ssh_private_key"})
    return known_hosts.pinned(given, state, record.name)


# Where the head refuses this machine's key: most often a cluster another runner launched with
# the key pair Ray's bootstrap made there (the file names none).
KEY_HINT = ("this machine's key is not one the head accepts: run this where the cluster was "
            "launched, or name a key in the file's auth.ssh_private_key whose public key is on "
            "the nodes")

FORWARD_PREFIX = "orc-fwd-"
# orc-fwd-NAMESPACE-PID-RANDOM: the PID namespace (the inode of /proc/self/ns/pid) and the pid of
# the process that made it. Older names (orc-fwd-RANDOM, no dash after it) never match.
# (Linux pids stay below 2**22: seven digits at most.)
_FORWARD_NAME = re.compile(r"orc-fwd-([0-9]{1,20})-([0-9]{1,7})-[a-z0-9_]+", re.ASCII)


def _pid_namespace() -> str:
    """This process's PID namespace ("x" where /proc cannot say: then nothing is swept)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "x"


def forward_folder_prefix() -> str:
    return f"{FORWARD_PREFIX}{_pid_namespace()}-{os.getpid()}-"


def sweep_forward_folders(tmp: str = "/tmp") -> list[str]:
    """Remove the forward folders of this user's processes that are gone: a process killed by
    SIGKILL cannot remove its own (its ssh dies with it, the folder stays). Only folders named
    by a process of this PID namespace (another namespace's pids cannot be asked about), real
    folders of this user, never what a link points at. Best effort: the removed."""
    namespace = _pid_namespace()
    removed: list[str] = []
    try:
        with os.scandir(tmp) as entries:
            named = [(entry, int(found.group(2))) for entry in entries
                     if (found := _FORWARD_NAME.fullmatch(entry.name))
                     and found.group(1) == namespace]
    except OSError:   # a /tmp that cannot be listed: left for next time
        return removed
    for entry, pid in named:
        try:
            mine = entry.is_dir(follow_symlinks=False) and \
                entry.stat(follow_symlinks=False).st_uid == os.getuid()
        except OSError:   # gone meanwhile
            continue
        if mine and not processes.alive(pid):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


@contextlib.contextmanager
def forward(auth: Mapping[str, Any], head_ip: str, remote_port: int, *, timeout: float,
            local_port: int | None = None, remote_host: str = "127.0.0.1",
            watch: list[subprocess.Popen[str]] | None = None) -> Iterator[int]:
    """A port on 127.0.0.1 that reaches `remote_host:remote_port` on the head, closed on exit.

    No port is ever picked, released and handed to ssh (another user could bind it first and be
    sent the token): `ssh -N -L SOCKET:remote_host:remote_port head` listens on a Unix socket in
    a fresh 0700 folder, and the port returned is a `Relay` this process binds first (port
    `local_port`, ClusterError if taken, else any) and holds until the block ends, piping each
    connection of this user to the socket. `watch` gets the ssh process, for a caller that keeps
    the forward open and must notice when it dies."""
    try:
        command = ssh.ssh_command(auth, head_ip)
    except ssh.SshError as exc:
        raise ClusterError(str(exc)) from None
    sweep_forward_folders()
    # 0700; short: a socket path. Named by this process, for the sweep after a SIGKILL.
    folder = tempfile.mkdtemp(prefix=forward_folder_prefix(), dir="/tmp")
    socket_path = os.path.join(folder, "dashboard")
    try:
        relay = Relay(socket_path, port=local_port or 0)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        raise ClusterError(f"local port {local_port} is taken on this machine",
                           hint="choose another with --port, or leave --port out for a free one")\
            from None
    # LogLevel INFO (ssh keeps the first value given): ssh then says on stderr when the head
    # refuses a connection through the forward (`_wait_forward` reads it)
    command[1:1] = ["-N", "-o", "LogLevel=INFO", "-o", "ExitOnForwardFailure=yes",
                    "-o", "StreamLocalBindMask=0177",
                    "-L", f"{socket_path}:{remote_host}:{remote_port}"]
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True,
                                   preexec_fn=dies_with_parent())  # noqa: PLW1509 - one C call
    except BaseException:
        relay.close()
        shutil.rmtree(folder, ignore_errors=True)
        raise
    if watch is not None:
        watch.append(process)
    drain = None
    try:
        relay.start()
        _wait_forward(process, socket_path, relay.port, head_ip, timeout,
                      f"{remote_host}:{remote_port}")
        drain = _drain(process)
        yield relay.port
    finally:
        relay.close()
        stop_child_group(process)
        if drain is not None:
            drain.join(timeout=2)   # it closes stderr at ssh's end: never a reused fd read
        elif process.stderr:
            process.stderr.close()
        shutil.rmtree(folder, ignore_errors=True)


def _drain(process: subprocess.Popen[str]) -> threading.Thread | None:
    """Read and drop what ssh says once the forward works (at LogLevel INFO a line per refused
    connection: a browser retrying a restarting Ray would fill the pipe, and ssh, blocked
    writing to it, would forward nothing more). Ends, closing the pipe, when ssh does."""
    stderr = process.stderr
    if stderr is None:
        return None
    fd = stderr.fileno()
    os.set_blocking(fd, True)

    def run() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 65536):
                pass
        stderr.close()

    thread = threading.Thread(target=run, name="ssh-forward-stderr", daemon=True)
    thread.start()
    return thread


# A far end that refuses connections this long (ssh up, its socket there, every connection
# through it refused on the head: nothing listens on that port) is not waited for any longer.
# A dashboard listens by the time `ray start` returns (Ray waits for its address), so this is a
# Ray that stopped, not one still starting; the grace covers a restart in progress.
REFUSED_FOR_S = 3.0
_REFUSED = "open failed: connect failed: Connection refused"


def _wait_forward(process: subprocess.Popen[str], socket_path: str, port: int, head_ip: str,
                  timeout: float, remote: str = "") -> None:
    """Until ssh listens on its socket and what it reaches answers HTTP through the relay;
    ClusterError at `timeout`, or sooner once the head has refused every connection for
    REFUSED_FOR_S (ssh says so on its stderr, read here without blocking)."""
    said: list[str] = []
    refused: list[float] = []   # when the first and the last refusal of the current run were seen
    if process.stderr is not None:
        os.set_blocking(process.stderr.fileno(), False)

    def refused_now() -> bool:
        """Whether ssh said, since last asked, that the head refused a connection."""
        try:
            chunk = os.read(process.stderr.fileno(), 65536) if process.stderr else b""
        except OSError:   # BlockingIOError: nothing new
            chunk = b""
        said.append(chunk.decode(errors="replace"))
        return _REFUSED in said[-1]

    def ready() -> bool | None:
        if process.poll() is not None:
            if process.stderr is not None:
                os.set_blocking(process.stderr.fileno(), True)
            error = ("".join(said) + (process.stderr.read() if process.stderr else "")) \
                .strip().splitlines()
            last = error[-1] if error else f"ssh exited with {process.returncode}"
            message = f"could not open an SSH port forward to the head {head_ip}: {last}"
            if "Permission denied (publickey" in last:
                raise KeyRefused(message, hint=KEY_HINT)
            raise ClusterError(message)
        if not os.path.exists(socket_path):
            return None
        if http.answers(f"http://127.0.0.1:{port}"):
            return True
        now = time.monotonic()
        if refused_now():
            refused[:] = [refused[0] if refused else now, now]
        if refused and now - refused[1] > 1.5:   # a try that was not refused: a new run
            refused.clear()
        if refused and refused[1] - refused[0] >= REFUSED_FOR_S:
            raise ClusterError(f"nothing listens on {remote or 'the port'} on the head "
                               f"{head_ip}: it refused every connection for "
                               f"{REFUSED_FOR_S:.0f} s (is Ray running there?)")
        return None

    if poll(ready, timeout=timeout, interval=0.2) is None:
        raise ClusterError(f"the SSH port forward to the head {head_ip} did not work within "
                           f"{timeout:.0f} s")


def head_line(config: dict[str, Any], command: str, *, tty: bool, in_container: bool = True) -> str:
    """What Ray's command runner runs on the head for `command` (`_with_interactive`, and
    `with_docker_exec` when the cluster runs in a container and `in_container`). The command
    ends on its own line, so a trailing `# comment` cannot swallow the closing parenthesis."""
    inner = f"source ~/.bashrc; export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore && ({command}\n)"
    line = f"bash --login -c -i {shlex.quote(inner)}"
    docker = config.get("docker") or {}
    if docker.get("container_name") and in_container:
        tool = "podman" if docker.get("use_podman") else "docker"
        line = (f"{tool} exec {'-it' if tty else '-i'} {shlex.quote(str(docker['container_name']))}"
                f" /bin/bash -c {shlex.quote(line)}")
    return line


def reach_head(record: ClusterRecord, state: State) -> tuple[dict[str, Any], list[str]]:
    """(rendered config, `ssh ... user@head`) of a cluster whose head answers SSH now;
    ClusterError naming the head and why not."""
    head = str(record.head_ip)
    config = rendered(record, state)
    pinned = auth(record, state)
    try:
        ssh.run(pinned, head, "true", timeout=20, login_shell=False)
        return config, ssh.ssh_command(pinned, head)
    except ssh.HostKeyChanged as exc:
        raise ClusterError(str(exc), hint=known_hosts.hint(record.name, exc.host)) from None
    except ssh.SshError as exc:
        raise ClusterError(f"cannot reach the head {head} of cluster {record.name!r} over SSH: "
                           f"{exc}", hint=f"`orchestrate status {record.name}` shows its health")\
            from None


def run_on_head(record: ClusterRecord, state: State, command: str, *,
                tty: bool | None = None, in_container: bool = True) -> int:
    """Run `command` on the head with this process's stdin/stdout/stderr; its exit code."""
    config, argv = reach_head(record, state)
    tty = sys.stdin.isatty() and sys.stdout.isatty() if tty is None else tty
    argv[1:1] = ["-tt"] if tty else ["-T"]
    argv.append(head_line(config, command, tty=tty, in_container=in_container))
    process = subprocess.Popen(argv, stderr=None if tty else subprocess.PIPE,
                               preexec_fn=dies_with_parent())  # noqa: PLW1509 - one C call
    with handing_signals_to(process):
        relay = None
        if process.stderr is not None:
            relay = threading.Thread(target=_relay, args=(process.stderr,), daemon=True)
            relay.start()
        code = process.wait()
        if relay is not None:
            relay.join(5)
    return code


def _relay(source: IO[bytes]) -> None:
    """The command's stderr as bytes (whatever their encoding), less bash's no-TTY noise."""
    sink = sys.stderr.buffer
    for line in source:
        if not line.startswith(_NO_TTY_NOISE):
            sink.write(line)
            sink.flush()
