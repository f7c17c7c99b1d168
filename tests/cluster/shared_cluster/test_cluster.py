"""The shared cluster itself: usable as launched (an authenticated job sees its 3 nodes), and an
SSH forward to a port only the head's loopback answers on (the cloud path to a dashboard)."""
from __future__ import annotations

import sys
import urllib.error
import urllib.request

import pytest

from orchestrator import contract
from orchestrator.util.waiting import until

from ..conftest import submit_and_wait

pytestmark = [pytest.mark.ssh, pytest.mark.ray, pytest.mark.xdist_group("shared_cluster")]

# Under Ray's own Python: the head's login shell finds another `python` first (see ssh_cluster).
COUNT_NODES = contract.RAY_PYTHON + ("exec $ray_python -c \"import ray; ray.init(); "
                                     "print('alive nodes:', sum(n['Alive'] for n in ray.nodes()))\"")


def test_ssh_cluster_fixture_is_usable(ssh_cluster):
    with ssh_cluster.open() as access:   # on-prem as on clouds: through the SSH forward
        assert access.via == "ssh-forward"
        logs = submit_and_wait(access.address, access.headers, COUNT_NODES)
    assert "alive nodes: 3" in logs
    text = ssh_cluster.cli("status").stdout
    assert ssh_cluster.name in text and " up " in text


def test_ssh_forward_reaches_a_loopback_only_port_on_the_head(ssh_cluster, tmp_path):
    """The cloud path: a dashboard bound to the head's 127.0.0.1 is reached via `ssh -L`."""
    from orchestrator.launch.ray_up.head import forward
    from orchestrator.util.ports import free_port

    (tmp_path / "hello").write_text("hello from the head's loopback")
    machine = ssh_cluster.machine
    head = machine.hosts[0]
    port_on_head = free_port()   # free here; the head's loopback is its own and as empty
    server = head.spawn(sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                        "--directory", str(tmp_path), str(port_on_head))
    auth = {"ssh_user": "root", "ssh_private_key": str(machine.client_key)}
    try:
        listening = f"exec 3<>/dev/tcp/127.0.0.1/{port_on_head}"
        assert until(lambda: head.in_host(listening, shell=True, check=False).returncode == 0,
                     timeout=20)
        assert http_status_or_none(f"http://{head.ip}:{port_on_head}/hello") is None  # not outside
        logins = machine.accepted_logins()
        with forward(auth, head.ip, port_on_head, timeout=20) as port, \
                urllib.request.urlopen(f"http://127.0.0.1:{port}/hello", timeout=10) as response:
            assert response.read() == b"hello from the head's loopback"
        assert machine.accepted_logins() == logins + 1
        assert until(lambda: http_status_or_none(f"http://127.0.0.1:{port}/") is None, timeout=10)
    finally:
        server.terminate()
        server.wait(10)


def http_status_or_none(url: str):
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None
