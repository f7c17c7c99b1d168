"""End to end over real SSH and the real Ray cluster launcher: up, use, up again, change, down."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
import yaml

from .conftest import launch, tear_down

pytestmark = [pytest.mark.ssh, pytest.mark.slow, pytest.mark.ray]


def submit_and_wait(address: str, headers: dict, entrypoint: str, timeout: float = 300) -> str:
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(address, headers=headers)
    job = client.submit_job(entrypoint=entrypoint)
    deadline = time.monotonic() + timeout
    while client.get_job_status(job) not in (JobStatus.SUCCEEDED, JobStatus.FAILED,
                                             JobStatus.STOPPED):
        assert time.monotonic() < deadline, "the job did not finish"
        time.sleep(1)
    assert client.get_job_status(job) == JobStatus.SUCCEEDED, client.get_job_logs(job)
    return client.get_job_logs(job)


def http_status(url: str, headers: dict | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


COUNT_NODES = ("python -c \"import ray; ray.init(); "
               "print('alive nodes:', sum(n['Alive'] for n in ray.nodes()))\"")


def test_up_use_up_again_change_down(make_machine, tmp_path):
    machine = make_machine()
    handle = launch(machine, tmp_path / "home", f"e2e-{machine.user.name}")
    try:
        # Three nodes on three addresses, all alive.
        status = json.loads(handle.cli("status", "--format", "json").stdout)
        assert [row["name"] for row in status] == [handle.name]
        live = status[0]["live"]
        assert live["nodes_alive"] == 3
        assert live["node_ips"] == sorted(machine.ips)
        assert handle.token not in json.dumps(status)

        # An authenticated job on the recorded address runs on the cluster.
        assert handle.address == f"http://{machine.ips[0]}:{status[0]['dashboard_port']}"
        logs = submit_and_wait(handle.address, handle.headers, COUNT_NODES)
        assert "alive nodes: 3" in logs

        # Without the token (or with a wrong one) the dashboard and job API refuse.
        for path in ("/api/jobs/", "/api/v0/nodes", "/api/version"):
            assert http_status(handle.address + path) == 401
            assert http_status(handle.address + path, {"Authorization": "Bearer nope"}) == 403

        # `up` again on the unchanged file: nothing touched, no SSH login, same Ray processes.
        pids, logins = machine.user.ray_pids(), machine.sshd.accepted_logins()
        again = handle.cli("up", str(handle.file), "-y", "--format", "json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["action"] == "unchanged"
        assert machine.sshd.accepted_logins() == logins
        assert machine.user.ray_pids() == pids

        # A change of autoscaling settings only: applied with --no-restart, Ray keeps running.
        config = yaml.safe_load(handle.file.read_text())
        config["idle_timeout_minutes"] = 9
        handle.file.write_text(yaml.safe_dump(config))
        gcs = machine.user.ray_pids("gcs_server")
        changed = handle.cli("up", str(handle.file), "-y", "--format", "json")
        assert changed.returncode == 0, changed.stderr
        result = json.loads(changed.stdout)
        assert result["action"] == "updated"
        assert result["changes"] == ["~ idle_timeout_minutes"]
        assert "--no-restart" in changed.stderr
        assert machine.user.ray_pids("gcs_server") == gcs
        assert result["health"]["session"] == live["session"]

        # Secrets never show up in what we print or log.
        for text in (again.stdout, again.stderr, changed.stdout, changed.stderr,
                     (handle.home / "clusters" / handle.name / "up.log").read_text(),
                     (handle.home / "clusters" / handle.name / "ray-cluster.yaml").read_text()):
            assert handle.token not in text
    finally:
        down = handle.cli("down", "-y")
    assert down.returncode == 0, down.stderr
    assert handle.record() is None
    assert not (handle.home / "clusters" / handle.name).exists()
    assert wait_until(lambda: not machine.user.ray_pids("ray|gcs_server|raylet"), 30), \
        "Ray processes of the cluster are still running after down"


def test_ssh_cluster_fixture_is_usable(ssh_cluster):
    with ssh_cluster.open() as access:
        assert access.address == ssh_cluster.address
        logs = submit_and_wait(access.address, access.headers, COUNT_NODES)
    assert "alive nodes: 3" in logs
    text = ssh_cluster.cli("status").stdout
    assert ssh_cluster.name in text and " up " in text


def test_moving_the_head_replaces_the_cluster(make_machine, tmp_path):
    """A change of where the cluster lives (here the on-prem head's address) is a `replace`:
    the old cluster goes down with the config it was launched with, then the new one comes up,
    so no Ray is left on the old head."""
    machine = make_machine()
    first, second, third = machine.ips
    handle = launch(machine, tmp_path / "home", f"mv-{machine.user.name}")
    try:
        old_gcs = machine.user.ray_pids("gcs_server")
        assert len(old_gcs) == 1
        config = yaml.safe_load(handle.file.read_text())
        config["provider"].update(head_ip=second, worker_ips=[first, third])
        config["worker_start_ray_commands"] = [
            command.replace(f"--address={first}:", "--address=$RAY_HEAD_IP:")
            for command in config["worker_start_ray_commands"]]
        handle.file.write_text(yaml.safe_dump(config))

        moved = handle.cli("up", str(handle.file), "-y", "--format", "json")
        assert moved.returncode == 0, moved.stderr
        result = json.loads(moved.stdout)
        assert result["action"] == "replaced"
        assert result["plan"]["reason"] == "provider.head_ip changed: a new cluster"
        assert result["plan"]["jobs_survive"] is False
        assert "tearing down cluster" in moved.stderr
        assert result["head_ip"] == second and result["address"].startswith(f"http://{second}:")
        assert result["health"]["nodes_alive"] == 3
        new_gcs = machine.user.ray_pids("gcs_server")
        assert len(new_gcs) == 1 and not new_gcs & old_gcs  # the old head's Ray is gone

        status = json.loads(handle.cli("status", "--format", "json").stdout)[0]
        assert status["head_ip"] == second and status["live"]["nodes_alive"] == 3
        assert status["live"]["node_ips"] == sorted(machine.ips)
    finally:
        tear_down(handle)
    assert handle.record() is None
    assert wait_until(lambda: not machine.user.ray_pids("ray|gcs_server|raylet"), 30), \
        "Ray processes of the cluster are still running after down"


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return predicate()


__all__ = ["submit_and_wait", "tear_down", "wait_until"]


def test_ssh_forward_reaches_a_loopback_only_port_on_the_head(ssh_cluster):
    """The cloud path: a dashboard bound to the head's 127.0.0.1 is reached via `ssh -L`."""
    import http.server
    import threading

    from orchestrator.endpoint import forward

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello from the head's loopback")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hello)  # this host is the "head"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    machine = ssh_cluster.machine
    auth = {"ssh_user": machine.user.name, "ssh_private_key": str(machine.sshd.client_key)}
    logins = machine.sshd.accepted_logins()
    try:
        with forward(auth, machine.ips[0], server.server_port, timeout=20) as port, \
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
            assert response.read() == b"hello from the head's loopback"
        assert machine.sshd.accepted_logins() == logins + 1
        assert wait_until(lambda: http_status_or_none(f"http://127.0.0.1:{port}/") is None, 10)
    finally:
        server.shutdown()
        server.server_close()


def http_status_or_none(url: str):
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None
