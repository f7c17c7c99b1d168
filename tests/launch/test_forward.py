"""The SSH forward leaves no port to take (issue 29, point 1): ssh listens on a Unix socket in a
0700 folder, and the port we use is a relay this process holds. Against a real sshd on loopback
addresses (its "head" shares this machine's loopback, where a fake dashboard of the test's own
listens), with a real squatter in another process on the port the old code would have picked."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile

import pytest

from orchestrator.launch.ray_up import head
from orchestrator.util import http, listeners, ports
from orchestrator.util.waiting import until
from tests.providers.test_local import sshd  # noqa: F401 - the fixture
from tests.squatters import serving, squatter

pytestmark = pytest.mark.ssh

TOKEN = "t0ken-for-the-head-only"


def ssh_children() -> list[list[str]]:
    """The `ssh` processes this test process started that still run. The test's sshd is a
    child too, and the process it forked for a connection that just closed can end while it is
    looked at (CI, 2026-12-03: psutil.NoSuchProcess reading its name): one that ended is not
    left behind."""
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.name() == "ssh":
                found.append(child.cmdline())
        except psutil.NoSuchProcess:
            pass
    return found


def test_a_squatter_on_the_picked_port_gets_no_token(sshd, tmp_path, monkeypatch):  # noqa: F811
    """The race won by the squatter, made certain: the port a forward would have been handed
    is already held by another process. The old forward took it for the head (its readiness
    probe got an answer there) and the token went to it; now the forward's port is ours."""
    auth = {"ssh_user": "root", "ssh_private_key": str(sshd["key"])}
    with serving() as dashboard, squatter(tmp_path / "got") as other:
        monkeypatch.setattr(ports, "free_port", lambda host="127.0.0.1": other.port)
        monkeypatch.setattr(head, "free_port", lambda host="127.0.0.1": other.port,
                            raising=False)
        remote_port = int(dashboard.address.rsplit(":", 1)[1])
        # what a SIGKILLed forward of a process gone leaves: swept by the next forward
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        left = tempfile.mkdtemp(prefix=head.forward_folder_prefix().replace(
            f"-{os.getpid()}-", f"-{gone.pid}-"), dir="/tmp")
        with head.forward(auth, sshd["hosts"][0], remote_port, timeout=20) as port:
            assert not os.path.exists(left)
            address = f"http://127.0.0.1:{port}"
            assert port != other.port and listeners.ours(address)
            assert http.get_json(address, "/api/version", TOKEN)["version"] == "4"
            [command] = ssh_children()
            forward = command[command.index("-L") + 1]
            folder = os.path.dirname(forward.split(":")[0])
            # a socket path, no TCP port, in a folder named by this process
            assert forward.startswith("/tmp/" + head.forward_folder_prefix())
            assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        assert not os.path.exists(folder) and ssh_children() == []
        assert other.received == b""
        assert dashboard.authorizations() == [f"Bearer {TOKEN}"]


def test_a_port_asked_for_and_taken_is_refused_before_ssh_starts(sshd, tmp_path):  # noqa: F811
    from orchestrator.errors import ClusterError

    auth = {"ssh_user": "root", "ssh_private_key": str(sshd["key"])}
    with squatter(tmp_path / "got") as other, \
            pytest.raises(ClusterError, match=f"local port {other.port} is taken"), \
            head.forward(auth, sshd["hosts"][0], 1, timeout=20, local_port=other.port):
        pass
    assert ssh_children() == [] and other.received == b""


def test_a_port_nothing_listens_on_is_said_without_waiting_out_the_timeout(sshd):  # noqa: F811
    """A head whose Ray stopped (autostop, a crash): ssh connects, the head refuses every
    connection to the dashboard's port. The forward says so after a few refusals, rather than
    trying until its timeout (the old wait ended there, saying only that the forward did not
    work)."""
    from orchestrator.errors import ClusterError

    auth = {"ssh_user": "root", "ssh_private_key": str(sshd["key"])}
    nothing = ports.free_port()
    with pytest.raises(ClusterError, match=f"nothing listens on 127.0.0.1:{nothing} on the head"), \
            head.forward(auth, sshd["hosts"][0], nothing, timeout=60):
        pass
    assert ssh_children() == []


def test_a_forward_outlives_a_thousand_refused_connections(sshd):  # noqa: F811
    """Ray restarting on the head while `orchestrate dashboard` is open: the browser's retries
    are refused there, and ssh (at LogLevel INFO) says so on stderr, a line each. Unread, those
    lines filled the pipe, ssh blocked writing to it and forwarded nothing more, even once Ray
    was back. Now the forward reaches the new dashboard."""
    import socket

    auth = {"ssh_user": "root", "ssh_private_key": str(sshd["key"])}
    remote_port = ports.free_port()
    first = serving(port=remote_port)
    first.__enter__()
    try:
        with head.forward(auth, sshd["hosts"][0], remote_port, timeout=20) as port:
            first.__exit__(None, None, None)   # Ray stops on the head
            first = None
            for _ in range(1500):   # ~60 bytes each on ssh's stderr: past a 64 KiB pipe
                with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
                    connection.sendall(b"GET / HTTP/1.0\r\n\r\n")
                    while connection.recv(4096):
                        pass
            with serving(port=remote_port) as again:   # and is back
                assert until(lambda: http.answers(f"http://127.0.0.1:{port}"), timeout=15)
                assert again.requests
    finally:
        if first is not None:
            first.__exit__(None, None, None)
    assert ssh_children() == []
