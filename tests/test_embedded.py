"""The embedded local Ray: private temp dir and ports, shared by concurrent runs, stopped by the
last one, and nothing left behind."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.reach import embedded as local
from orchestrator.state import State
from tests.helpers import jobs_client

pytestmark = [pytest.mark.ray, pytest.mark.own_ray]


def secrets():
    return State.here().secrets


def ray_processes(temp_dir: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if temp_dir.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_one_life_started_reused_kept_stopped_and_a_new_token_each_time():
    """The local Ray's whole life in two instances (each start costs ~10 s): the first run
    starts it, token auth on; a second run reuses it and, detached, asks to keep it; it outlives
    both until `shutdown`, which leaves nothing. The next instance has a new token and is
    stopped by its last user."""
    try:
        with local.session(secrets()) as (ray, started):
            assert started and ray.address.startswith("http://127.0.0.1:")
            assert len(ray.temp_dir) < 30  # unix socket paths under it stay short
            assert ray_processes(ray.temp_dir)
            token = secrets().read(local.TOKEN_KEY)
            path = secrets().path(local.TOKEN_KEY)
            assert token and path.parent.parent == Path(os.environ["ORCHESTRATE_HOME"])
            assert path.stat().st_mode & 0o777 == 0o600
            record = Path(os.environ["ORCHESTRATE_HOME"]) / "local-ray" / "record.json"
            assert token not in record.read_text()
            for api in ("/api/jobs/", "/api/version", "/api/v0/nodes"):
                assert http_status(ray.address + api) == 401
                assert http_status(ray.address + api, "wrong") == 403
            assert http_status(ray.address + "/api/jobs/", token) == 200
            assert jobs_client(ray).list() == []  # our client sends it
            # run --detach of an experiment with `profiling: true` (issue 33): this Ray was
            # started without it and is not restarted under the first run; the run is told so
            said: list[str] = []
            with local.session(secrets(), keep=True, profiling=True,
                               progress=said.append) as (again, started_again):
                assert again.pid == ray.pid and not started_again and not again.profiling
                assert said == [local.PROFILING_OFF.format(label=local.LABEL, pid=ray.pid)]
                assert "`orchestrate stop --embedded`" in said[0]
                refused = http_status(ray.address + "/worker/traceback?pid=1&ip=127.0.0.1",
                                      token, body=True)
                assert refused[0] == 403 and "RAY_DASHBOARD_ENABLE_PROFILING=1" in refused[1]
            assert local.current(secrets()) is not None  # the first user is still running
        kept = local.current(secrets())   # both left; kept for the detached job
        assert kept is not None and kept.pid == ray.pid
        assert local.shutdown(secrets())
        assert local.current(secrets()) is None
        assert ray_processes(ray.temp_dir) == []
        assert not os.path.exists(ray.temp_dir)
        assert not path.exists()  # the token went with its instance
        assert not local.shutdown(secrets())

        with local.session(secrets()) as (second, started):
            assert started and second.pid != ray.pid and secrets().read(local.TOKEN_KEY) != token
            with local.session(secrets()) as (_, started_again):
                assert not started_again
        assert local.current(secrets()) is None  # stopped by its last user: nobody asked to keep it
        assert ray_processes(second.temp_dir) == []
        assert not os.path.exists(second.temp_dir)

    finally:
        local.shutdown(secrets())   # whatever failed, no Ray is left running

def http_status(url: str, token: str | None = None, *, body: bool = False):
    """The status of a GET of `url`; with `body`, (status, the answer's text)."""
    import urllib.error
    import urllib.request

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return (r.status, r.read().decode(errors="replace")) if body else r.status
    except urllib.error.HTTPError as exc:
        return (exc.code, exc.read().decode(errors="replace")) if body else exc.code


# A stand-in for `ray start` that exits during start-up as Ray 2.60's does on a machine too busy
# for its fixed waits (the raylet's 15 s for the agent's port files; with --block, `ray start`
# then stops everything it started), after making the temp dir it was given.
EXITS = ("import os, sys\n"
         "os.makedirs(sys.argv[sys.argv.index('--temp-dir') + 1])\n"
         "print('Check failed: Timed out waiting for file metrics_agent_port_x', flush=True)\n"
         "sys.exit(1)\n")


def test_a_ray_start_that_exits_during_start_up_is_tried_once_more(monkeypatch):
    """The first `ray start` exits on its own (a stand-in, EXITS); the second is Ray's. `start`
    says it tries again, leaves nothing of the first attempt, and returns only once the node
    has joined (before, it returned when the dashboard answered, and Ray could still abort)."""
    import sys

    real = local.ray_command
    commands: list[list[str]] = []

    def first_exits(*args: str) -> list[str]:
        command = real(*args)
        commands.append(command)
        return [sys.executable, "-c", EXITS, *args] if len(commands) == 1 else command

    monkeypatch.setattr(local, "ray_command", first_exits)
    said: list[str] = []
    with local.session(secrets(), progress=said.append) as (ray, started):
        assert started and said == [local.RETRY_NOTE] and len(commands) == 2
        first_dir = commands[0][commands[0].index("--temp-dir") + 1]
        assert not Path(first_dir).parent.exists()   # its private folder is gone
        nodes = jobs_client(ray).nodes()
        assert nodes and [node["state"] for node in nodes] == ["ALIVE"], nodes
    # its last user stopped it
    assert ray_processes(ray.temp_dir) == [] and not Path(ray.temp_dir).exists()


def test_a_ray_start_that_always_exits_is_tried_twice_then_reported(monkeypatch):
    """`ray start` exiting on its own every time (the stand-in, EXITS) is tried once more, then
    reported with its log's tail and no traceback; nothing of either attempt is left."""
    import sys

    from orchestrator.errors import JobError

    started: list[str] = []

    def exits(*args: str) -> list[str]:
        started.append(args[args.index("--temp-dir") + 1])
        return [sys.executable, "-c", EXITS, *args]

    monkeypatch.setattr(local, "ray_command", exits)
    said: list[str] = []
    with pytest.raises(JobError) as caught, local.session(secrets(), progress=said.append):
        pass
    assert said == [local.RETRY_NOTE] and len(started) == 2
    assert "the embedded Ray did not start" in caught.value.message
    assert "Timed out waiting for file metrics_agent_port_x" in caught.value.message
    assert not any(Path(path).parent.exists() for path in started)
    assert local.recorded() is None
