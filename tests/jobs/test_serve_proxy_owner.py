"""The embedded Ray's Serve proxy is given a port picked free, which Serve then binds: `serve`
must not report the service up (and so send clients there with its token) unless the listener
is the embedded Ray's. Real listeners in real processes: the "embedded Ray" is a process group
of our own holding a dashboard port; the proxy port is held by a process of that group, or by
a squatter outside it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from orchestrator.errors import ServeError
from orchestrator.jobs.serve import _proxy_is_the_embedded_rays
from orchestrator.reach.endpoint import EMBEDDED, Endpoint
from orchestrator.util import listeners

# Binds 127.0.0.1:0 `count` times, prints the ports, sleeps: a stand-in for Ray's processes.
LISTEN = ("import socket, sys, time\n"
          "socks = []\n"
          "for _ in range(int(sys.argv[1])):\n"
          "    s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); socks.append(s)\n"
          "print(' '.join(str(s.getsockname()[1]) for s in socks), flush=True)\n"
          "time.sleep(120)\n")

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/net/tcp"),
                                reason="listener ownership is read from /proc (Linux)")


def _listening(count: int, *, new_group: bool) -> tuple[subprocess.Popen, list[int]]:
    process = subprocess.Popen([sys.executable, "-c", LISTEN, str(count)], text=True,
                               stdout=subprocess.PIPE, start_new_session=new_group)
    assert process.stdout is not None
    return process, [int(p) for p in process.stdout.readline().split()]


def _stop(*processes: subprocess.Popen) -> None:
    for process in processes:
        process.kill()
        process.wait(10)
        if process.stdout:
            process.stdout.close()


def test_a_proxy_port_held_outside_the_embedded_rays_group_is_refused():
    ray, (dashboard, proxy) = _listening(2, new_group=True)
    squatter, (taken,) = _listening(1, new_group=True)
    try:
        endpoint = Endpoint(f"http://127.0.0.1:{dashboard}", "tok", "the embedded Ray", EMBEDDED)
        listeners.vouch(endpoint.address, ray.pid)
        _proxy_is_the_embedded_rays(f"http://127.0.0.1:{proxy}", endpoint)   # its own: fine
        with pytest.raises(ServeError) as caught:
            _proxy_is_the_embedded_rays(f"http://127.0.0.1:{taken}", endpoint)
        assert f"127.0.0.1:{taken}" in caught.value.message
        assert "token" in caught.value.message and caught.value.hint
    finally:
        _stop(ray, squatter)
