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
