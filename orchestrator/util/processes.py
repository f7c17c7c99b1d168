"""Stopping what we started: a child in its own process group, and whatever it left behind.

Every long-lived child (`ray up`, an SSH forward, the embedded Ray) is started with
`start_new_session=True`, so it leads its own group and a signal to the group reaches all of it.
psutil finds processes portably (no /proc scans).
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import OrchestrateError, require
from .waiting import until

# SIGINT first: `ray up` and `ray down` clean up on it; then TERM, then KILL.
GENTLE = ((signal.SIGINT, 5.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0))


def stop_child_group(process: subprocess.Popen[str] | subprocess.Popen[bytes],
                     steps: Iterable[tuple[signal.Signals, float]] = GENTLE) -> None:
    """Our child (leader of its own group): signal its whole group, step by step, until the
    child has exited; it is reaped through its Popen. For `ray up`, `ray down`, SSH forwards."""
    for sig, wait in steps:
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(wait)


PR_SET_PDEATHSIG = 1   # prctl(2)


def dies_with_parent() -> Callable[[], object] | None:
    """A `preexec_fn` (None off Linux): the child gets SIGTERM when we die, even by SIGKILL,
    which no handler of ours sees, so a killed `orchestrate up` leaves no `ray up` working on
    alone. Resolved here, before the fork: in the child it is one C call, nothing in Python."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import functools

    return functools.partial(ctypes.CDLL(None, use_errno=True).prctl, PR_SET_PDEATHSIG,
                             int(signal.SIGTERM))


def ray_command(*args: str) -> list[str]:
    """`ray ...` with the Ray installed beside this interpreter (no PATH lookup, no venv that
    must be activated)."""
    return [sys.executable, "-m", "ray.scripts.scripts", *args]


def names_in_command_line(pid: int, fragment: str) -> bool:
    """Whether process `pid` runs and has `fragment` in its command line: a pid is ours before
    we signal it, not a stranger that got the number after ours exited. An empty fragment (or
    "/" alone: a damaged record) names nothing."""
    if not fragment.strip("/"):
        return False
    require("psutil", "psutil", "ray")
    import psutil

    try:
        return any(fragment in arg for arg in psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def group_alive(pgid: int) -> bool:
    """Whether any process (zombies aside) is still in process group `pgid`."""
    require("psutil", "psutil", "ray")
    import psutil

    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if os.getpgid(proc.pid) == pgid:
                return True
        except ProcessLookupError:
            continue
    return False


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as gone)."""
    require("psutil", "psutil", "ray")
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


STRAGGLERS = 3.0   # how long what is left of a group may take to exit once its leader has


def stop_group(pgid: int, *, timeout: float) -> None:
    """A process group whose leader may not be our child (the embedded Ray, started by another
    command): SIGTERM the leader, which stops the rest itself; once the leader is gone (or
    after `timeout`), the rest gets STRAGGLERS seconds, then SIGKILL. (A Ray dashboard module
    caught connecting to the cluster as the GCS stops retries for 30 s and more.)"""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pgid, signal.SIGTERM)

    def reaped() -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pgid, os.WNOHANG)  # reap the leader if it is our child

    def leader_gone() -> bool:
        reaped()
        return not alive(pgid)

    until(leader_gone, timeout=timeout, interval=0.2)
    until(lambda: not group_alive(pgid), timeout=STRAGGLERS, interval=0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pgid, 0)


# The only folders `kill_naming` may name: the embedded Ray's temp dirs (`reach.embedded.start`:
# tempfile.mkdtemp(prefix="orc-", dir="/tmp")). Anything wider, "" or "/" from a damaged record,
# would match the arguments of nearly every process.
KILLABLE_PARENT, KILLABLE_PREFIX = "/tmp", "orc-"


def is_embedded_temp_dir(path: str) -> bool:
    """Whether `path` (written out, normalised) is an embedded Ray's temp dir: /tmp/orc-<name>,
    or Ray's own folder inside it, /tmp/orc-<name>/ray."""
    private = os.path.dirname(path) if os.path.basename(path) == "ray" else path
    name = os.path.basename(private)
    return os.path.normpath(path) == path and os.path.dirname(private) == KILLABLE_PARENT \
        and name.startswith(KILLABLE_PREFIX) and len(name) > len(KILLABLE_PREFIX)


def kill_naming(fragment: str) -> None:
    """SIGKILL every process (but this one) with an argument that ends with the path `fragment`
    (`--temp-dir=/tmp/x`) or names something inside it: what a child left outside its group.
    `fragment` must be an embedded Ray's temp dir, /tmp/orc-<something> or /tmp/orc-<something>/ray
    (Ray's own folder inside our 0700 one); anything else is refused (OrchestrateError) before
    a process is looked at."""
    needle = fragment.rstrip("/")
    if not is_embedded_temp_dir(needle):
        raise OrchestrateError(
            f"refusing to stop processes by the path {fragment!r}: it is not a temp folder of "
            f"the embedded Ray ({KILLABLE_PARENT}/{KILLABLE_PREFIX}*)",
            hint="the embedded Ray's record ($ORCHESTRATE_HOME/local-ray/record.json) may be "
                 "damaged: stop its processes by hand (their command lines name its temp "
                 "folder), then remove the record")
    require("psutil", "psutil", "ray")
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid == os.getpid():
            continue
        args = proc.info["cmdline"] or []
        if any(arg.endswith(needle) or needle + "/" in arg for arg in args):
            with contextlib.suppress(psutil.Error):
                proc.kill()


@contextlib.contextmanager
def handing_signals_to(child: subprocess.Popen[Any]) -> Iterator[None]:
    """While `child` owns the terminal. Ctrl-C is the child's: a shell sends it to the whole
    foreground group, ssh passes it on (at a TTY, as a keystroke). Our handler does nothing,
    but, unlike SIG_IGN, is not inherited, so the child still gets SIGINT's default. SIGTERM
    and SIGHUP (the terminal closed) are passed to the child, so it never outlives us."""
    def nothing(*_: object) -> None:
        return

    def pass_on(number: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(number)

    before = {number: signal.signal(number, handler) for number, handler in
              ((signal.SIGINT, nothing), (signal.SIGTERM, pass_on), (signal.SIGHUP, pass_on))}
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
