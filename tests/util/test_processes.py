"""A child started with `dies_with_parent` does not outlive its parent, even a SIGKILLed one."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from orchestrator.util.processes import alive

PARENT = """
import subprocess, sys, time
from orchestrator.util.processes import dies_with_parent
guarded = subprocess.Popen(["sleep", "120"], preexec_fn=dies_with_parent())
plain = subprocess.Popen(["sleep", "120"])
print(guarded.pid, plain.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_guarded_child_dies_with_its_killed_parent():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    guarded, plain = map(int, parent.stdout.readline().split())
    try:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while alive(guarded) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(guarded)
        assert alive(plain)   # what happens without it: the orphan works on
    finally:
        for pid in (guarded, plain):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        parent.stdout.close()


def test_kill_naming_refuses_a_needle_that_names_more_than_an_embedded_rays_temp_dir(
        tmp_path, monkeypatch):
    """A damaged record of the embedded Ray (`temp_dir` "" or "/") would make `kill_naming`
    SIGKILL every process whose arguments hold a "/". The guard refuses anything but a
    /tmp/orc-* folder. The processes it may look at are narrowed to one sentinel child, so a
    missing guard kills that child, never the machine's other processes."""
    import psutil

    from orchestrator.errors import OrchestrateError
    from orchestrator.util.processes import kill_naming, names_in_command_line

    sentinel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                 "/tmp/orc-x/ray/session", str(tmp_path / "f")])
    try:
        only = psutil.Process(sentinel.pid)
        # Popen returns once exec has begun; the new image's arguments show a moment later
        # (an empty /proc/PID/cmdline until then).
        for _ in range(200):
            if only.cmdline():
                break
            time.sleep(0.05)
        monkeypatch.setattr(psutil, "process_iter", lambda *a, **k: iter([only]))
        only.info = {"cmdline": only.cmdline()}
        for needle in ("", "/", "//", "/tmp", "/tmp/", "/home", str(tmp_path), "/tmp/orc-",
                       "/tmp/x", "/tmp/orc-x/..", "/tmp/orc-x/../..", "tmp/orc-x", "/var/tmp/orc-x",
                       "/ray", "/tmp/ray", "/tmp/orc-/ray", "/tmp/x/ray", "/tmp/orc-x/ray/.."):
            with pytest.raises(OrchestrateError, match="refusing to stop processes"):
                kill_naming(needle)
            assert sentinel.poll() is None, needle
        assert not names_in_command_line(sentinel.pid, "")
        assert not names_in_command_line(sentinel.pid, "/")
        assert names_in_command_line(sentinel.pid, "/tmp/orc-x")
        kill_naming("/tmp/orc-y")         # a sound needle that names nothing here
        assert sentinel.poll() is None
        kill_naming("/tmp/orc-x/ray/")    # and one that names it (Ray's folder in our 0700 one)
        assert sentinel.wait(10) == -signal.SIGKILL
    finally:
        if sentinel.poll() is None:
            sentinel.kill()
        sentinel.wait()


LEADER = """
import signal, subprocess, sys, time
straggler = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                              "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
print(straggler.pid, flush=True)
time.sleep(300)
"""


def test_stop_group_does_not_wait_its_timeout_for_a_straggler_once_the_leader_is_gone():
    """A Ray dashboard module caught connecting as the GCS stops ignores SIGTERM for 30 s and
    more: once the leader has exited, what is left of its group is killed after a short grace
    (the old wait for the whole group would sit out this test's timeout of an hour)."""
    from orchestrator.util.processes import stop_group
    from orchestrator.util.waiting import until

    leader = subprocess.Popen([sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    straggler = int(leader.stdout.readline())
    try:
        stop_group(leader.pid, timeout=3600)
        assert leader.poll() is not None
        assert until(lambda: not alive(straggler), timeout=30)   # SIGKILLed: no longer waited for
    finally:
        for pid in (leader.pid, straggler):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        leader.wait()
        leader.stdout.close()
