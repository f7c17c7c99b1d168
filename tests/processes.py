"""What a test started: the one way every fixture ends its child processes, and the one way to
find the processes of this test session that are still running."""
from __future__ import annotations

import os
import re
import subprocess


def stop(process: subprocess.Popen | None, timeout: float = 10) -> None:
    """SIGTERM, wait up to `timeout`, then SIGKILL; always reaps the child."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def of_this_session(pattern: str) -> set[int]:
    """Running processes whose command line matches `pattern` (a regular expression) and that
    belong to this test session: they carry its ORCHESTRATE_TEST_SESSION (tests/conftest.py sets
    it; every child inherits it). A developer's own Ray, or another session beside this one,
    is not counted; nor is this process."""
    tag = f"ORCHESTRATE_TEST_SESSION={os.environ.get('ORCHESTRATE_TEST_SESSION')}".encode()
    wanted = re.compile(pattern.encode())
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as file:
                if not wanted.search(file.read().replace(b"\0", b" ")):
                    continue
            with open(f"/proc/{entry.name}/environ", "rb") as file:
                if tag in file.read().split(b"\0"):
                    found.add(int(entry.name))
        except OSError:   # gone, or not ours to read
            continue
    return found
