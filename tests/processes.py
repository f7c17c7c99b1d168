"""Stopping what a test started: the one way every fixture ends its child processes."""
from __future__ import annotations

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
