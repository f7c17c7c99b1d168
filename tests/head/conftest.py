"""Fixtures of the head's tests: moto, the watcher's files in a temporary home (`head_home`)
and its takedowns recorded (`stops`), and the head's dashboard as the watcher and the archiver
reach it. The head asks only a listener proven this user's Ray dashboard (`head.listener`: a
process of this user running `ray/dashboard/dashboard.py`), so a test's HTTP server in this
process sits behind `fake_dashboard.py` run as such a process (`dashboard`), which relays to it.
A stranger is the same relay under another name, or run as another user (`stranger`)."""
from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.head import autostop, takedown
from tests.moto_server import moto_server  # noqa: F401 - a fixture
from tests.test_archive import FakeRay

RELAY = Path(__file__).with_name("fake_dashboard.py")
NOBODY = 65534
T0 = 1_000_000.0   # when Ray started on the watcher's head


@contextlib.contextmanager
def relay(script: Path, backend: int, *, uid: int | None = None) -> Iterator[int]:
    """`fake_dashboard.py` copied to `script` and run (as `uid`, through setpriv), relaying to
    `backend`; the port it listens on. Stopped after."""
    script.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(RELAY, script)
    script.chmod(0o644)
    argv = [sys.executable, str(script), "--port=0", f"--backend={backend}"]
    if uid is not None:   # another user's Python: the system's (this venv's may be private)
        argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                "/usr/bin/python3", *argv[1:]]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield int(process.stdout.readline())
    finally:
        process.kill()
        process.wait()
        if process.stdout:
            process.stdout.close()


@pytest.fixture
def dashboard(tmp_path) -> Iterator:
    """dashboard(port) -> the port of a listener the head proves this user's Ray dashboard,
    relaying to the test's server at `port`."""
    numbers = itertools.count()
    with contextlib.ExitStack() as stack:
        def start(backend: int) -> int:
            script = tmp_path / f"dashboard-{next(numbers)}" / "ray" / "dashboard" / \
                "dashboard.py"
            return stack.enter_context(relay(script, backend))
        yield start


def can_run_as_nobody() -> bool:
    return os.getuid() == 0 and bool(shutil.which("setpriv")) and os.path.exists(
        "/usr/bin/python3")


@pytest.fixture
def stranger(tmp_path) -> Iterator:
    """stranger(kind, port) -> the port of a listener that is not this user's Ray, relaying to
    `port`: "process" (this user's, not Ray's dashboard) or "user" (Ray's dashboard's command
    line, run as nobody; skipped where that cannot be done)."""
    with contextlib.ExitStack() as stack:
        def start(kind: str, backend: int) -> int:
            if kind == "process":
                return stack.enter_context(relay(tmp_path / "stranger" / "server.py", backend))
            if not can_run_as_nobody():
                pytest.skip("needs root and setpriv to run a listener as another user")
            folder = Path(tempfile.mkdtemp(prefix="orchestrate-stranger-"))
            stack.callback(shutil.rmtree, folder, True)
            script = folder / "ray" / "dashboard" / "dashboard.py"
            script.parent.mkdir(parents=True)
            for path in (folder, *folder.rglob("*")):   # for nobody to read
                path.chmod(0o755)
            return stack.enter_context(relay(script, backend, uid=NOBODY))
        yield start


@pytest.fixture
def ray(dashboard) -> Iterator[FakeRay]:
    """tests/test_archive.py's Ray job API, behind a listener proven Ray's dashboard."""
    fake = FakeRay()
    fake.address = f"http://127.0.0.1:{dashboard(int(fake.address.rsplit(':', 1)[1]))}"
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def head_home(tmp_path, monkeypatch):
    """The watcher's files in a temporary home, and a /proc where Ray started at T0."""
    folder = tmp_path / ".orchestrate"
    folder.mkdir()
    for name, value in (("FOLDER", folder), ("STATUS_FILE", folder / "autostop.json"),
                        ("LOG_FILE", folder / "autostop.log"),
                        ("BOOTSTRAP", tmp_path / "ray_bootstrap_config.yaml"),
                        ("TOKEN_FILE", tmp_path / "auth_token"),
                        ("UP_FILE", folder / "up-done")):
        monkeypatch.setattr(autostop, name, value)
    (folder / "up-done").touch()
    os.utime(folder / "up-done", (T0, T0))   # `orchestrate up` finished as Ray started
    (tmp_path / "auth_token").write_text("secret-token\n")
    monkeypatch.setattr(autostop, "ray_started", lambda: T0)
    monkeypatch.setattr(autostop, "ssh_terminals", lambda: 0)
    return tmp_path


@pytest.fixture
def stops(monkeypatch):
    """What the watcher archives and takes down, recorded (the takedown answers as told)."""
    done: dict = {"archived": [], "down": [], "ok": [True]}
    monkeypatch.setattr(autostop, "archive_logs",
                        lambda config, reason, details, log: done["archived"].append(reason))

    def down(config, reason, log):
        done["down"].append(reason)
        ok = done["ok"].pop(0) if len(done["ok"]) > 1 else done["ok"][0]
        log("taking the cluster down" if ok else "ray stop on 10.0.0.2 failed (255): refused")
        return ok

    monkeypatch.setattr(takedown, "take_down", down)
    return done
