"""Small helpers shared by test modules (fixtures live in conftest.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def jobs_client(ray: Any) -> Any:
    """A JobsClient on the embedded local Ray `ray`, with its token."""
    from orchestrator.clients.jobs import JobsClient
    from orchestrator.state import State

    return JobsClient(ray.endpoint(State.here().secrets))


def at_terminal(args: list[str], env: dict, answers: dict[str, str], timeout: float = 300
                ) -> tuple[int, str]:
    """Run `args` with a pseudo-terminal as its stdin, stdout and stderr, as a person at a
    terminal would; when the output shows a key of `answers`, type its value (and Enter).
    Returns the exit code and everything it printed (an unanswered prompt times out)."""
    import os
    import pty
    import select
    import subprocess
    import time

    leader, follower = pty.openpty()
    process = subprocess.Popen(args, env=env, stdin=follower, stdout=follower, stderr=follower,
                               start_new_session=True)
    os.close(follower)
    output, pending = b"", dict(answers)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # EIO: every end of the terminal in the process is closed
                    break
                if not chunk:
                    break
                output += chunk
                for prompt in [p for p in pending if p in output.decode(errors="replace")]:
                    os.write(leader, pending.pop(prompt).encode() + b"\n")
            elif process.poll() is not None:
                break
        else:
            raise AssertionError(f"{args} did not end within {timeout} s:\n{output.decode()}")
        return process.wait(timeout=30), output.decode(errors="replace").replace("\r\n", "\n")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(leader)


def stop(process: Any, number: int) -> tuple[str, str]:
    """Send signal `number` to a Popen; its output once it ended (killed, and the test failed,
    if it did not end within 30 s)."""
    import subprocess

    process.send_signal(number)
    try:
        return process.communicate(timeout=30)  # type: ignore[no-any-return]
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        raise AssertionError(f"it did not end on signal {number}:\n{err}") from None


def read_json_object(process: Any) -> dict:
    """The first JSON object a Popen (text mode) prints on stdout, indented over several lines
    (`--format json`); AssertionError with its stderr if it ends without one."""
    import json

    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.rstrip() == "}":
            return json.loads("".join(lines))  # type: ignore[no-any-return]
    raise AssertionError(f"no JSON printed; stderr:\n{process.stderr.read()}")


class chromium:  # noqa: N801 - a context manager read as a noun
    """Debian's headless Chromium with a new, empty profile, driven by chromedriver."""

    def __init__(self, profile: Path) -> None:
        self.profile = profile

    def __enter__(self):
        import os

        import pytest
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        missing = [p for p in ("/usr/bin/chromium", "/usr/bin/chromedriver") if not os.path.exists(p)]
        if missing:
            pytest.fail(f"the browser test needs {missing} (Debian packages chromium and "
                        f"chromium-driver; `bash scripts/setup-dev.sh` installs them as root)",
                        pytrace=False)
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                     "--no-first-run", "--disable-background-networking", "--disable-sync",
                     "--disable-component-update", "--disable-dev-shm-usage",
                     "--window-size=1400,1000", f"--user-data-dir={self.profile}"):
            options.add_argument(flag)
        # every request the page makes, for the tests that check where they went
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
        self.driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        return self.driver

    def __exit__(self, *_):
        self.driver.quit()
