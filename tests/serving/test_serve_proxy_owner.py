"""The embedded Ray's Serve proxy is given a port picked free, which Serve then binds: `serve`
must not report the service up (and so send clients there with its token) unless the listener
is held by a process of that Ray: a descendant of its `ray start` (Ray starts its workers, the
proxy among them, in process groups of their own and retitles them). Real listeners in real
processes; only which embedded Ray is recorded is set by the test (`embedded.current`), since
starting one here would put this check in the ray tier for no more coverage: the ray tier's
serve tests pass through it with a real Ray."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from orchestrator.errors import ServeError
from orchestrator.reach import embedded
from orchestrator.serving import serve
from orchestrator.state import State
from orchestrator.util import listeners

# Binds 127.0.0.1:0, prints the port, sleeps.
LISTEN = ("import socket, sys, time\n"
          "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
          "print(s.getsockname()[1], flush=True)\n"
          "time.sleep(120)\n")
# A stand-in for `ray start`: starts a LISTEN child (a "worker" in a session of its own, as
# Ray's raylet does), prints the child's port, sleeps.
PARENT = ("import subprocess, sys, time\n"
          "child = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdout=subprocess.PIPE,"
          " text=True, start_new_session=True)\n"
          "print(child.stdout.readline().strip(), flush=True)\n"
          "time.sleep(120)\n")

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/net/tcp"),
                                reason="listener ownership is read from /proc (Linux)")


def _listening(script: str, *arguments: str) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen([sys.executable, "-c", script, *arguments], text=True,
                               stdout=subprocess.PIPE, start_new_session=True)
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def _stop(*processes: subprocess.Popen) -> None:
    import psutil

    for process in processes:
        for child in psutil.Process(process.pid).children(recursive=True):
            child.kill()
        process.kill()
        process.wait(10)
        if process.stdout:
            process.stdout.close()


def test_a_proxy_port_held_by_a_process_outside_the_embedded_ray_is_refused(tmp_path,
                                                                             monkeypatch):
    ray, port = _listening(PARENT, LISTEN)        # `ray start` and its worker holding the port
    squatter, taken = _listening(LISTEN)
    try:
        listeners.check_descendant(f"http://127.0.0.1:{port}", ray.pid)   # the Ray's own: fine
        with pytest.raises(listeners.NotOurs):
            listeners.check_descendant(f"http://127.0.0.1:{taken}", ray.pid)
        monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
        recorded = embedded.EmbeddedRay("http://127.0.0.1:1", "127.0.0.1:2", ray.pid,
                                        "/tmp/orc-test/ray", 2)
        monkeypatch.setattr(embedded, "current", lambda _secrets: recorded)
        serve._proxy_is_the_embedded_rays(f"http://127.0.0.1:{port}", State.here())
        with pytest.raises(ServeError) as caught:
            serve._proxy_is_the_embedded_rays(f"http://127.0.0.1:{taken}", State.here())
        assert f"127.0.0.1:{taken}" in caught.value.message
        assert "token" in caught.value.message and caught.value.hint
    finally:
        _stop(ray, squatter)
