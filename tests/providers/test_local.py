"""Local-provider preflight against a real sshd of the test's own on loopback addresses."""
from __future__ import annotations

import getpass
import os
import random
import re
import shutil
import socket
import subprocess
import time

import pytest

from orchestrator.providers import FAIL, OK, check_cluster
from tests import prerequisites
from tests.processes import stop

from .conftest import by_name, only

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _keygen(path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


@pytest.fixture
def sshd(tmp_path):
    """sshd on port 22 of two fresh 127.x addresses, accepting one generated key for this user."""
    prerequisites.require()  # root (sshd binds port 22) and openssh: fails, never skips
    prefix = f"127.{random.randint(100, 250)}.{random.randint(1, 250)}"
    hosts = [f"{prefix}.1", f"{prefix}.2"]
    host_key = _keygen(tmp_path / "host_key")
    client_key = _keygen(tmp_path / "client_key")
    (tmp_path / "authorized_keys").write_text((tmp_path / "client_key.pub").read_text())
    config = tmp_path / "sshd_config"
    config.write_text("\n".join([
        *[f"ListenAddress {host}:22" for host in hosts],
        f"HostKey {host_key}", f"PidFile {tmp_path / 'sshd.pid'}",
        f"AuthorizedKeysFile {tmp_path / 'authorized_keys'}",
        "StrictModes no", "UsePAM no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        # The login's home is the test's own: the shell sshd starts would otherwise run the real
        # ~/.bashrc (on these machines, `pyenv init` rewrites ~/.pyenv/shims).
        f"SetEnv HOME={tmp_path / 'login-home'}", "",
    ]))
    (tmp_path / "login-home").mkdir()
    os.makedirs("/run/sshd", exist_ok=True)
    log_path = tmp_path / "sshd.log"  # a file, not a pipe nobody reads while sshd runs
    with open(log_path, "w") as log:
        process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=log)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((hosts[1], 22), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"sshd did not start: {log_path.read_text()[-300:]}")
                time.sleep(0.1)
        yield {"hosts": hosts, "key": client_key, "unused": f"{prefix}.9"}
    finally:
        stop(process)


def local_yaml(head, workers, key, user=None):
    return f"""
    cluster_name: preflight-local
    provider:
      type: local
      head_ip: {head}
      worker_ips: [{", ".join(workers)}]
    auth:
      ssh_user: {user or getpass.getuser()}
      ssh_private_key: {key}
    min_workers: {len(workers)}
    max_workers: {len(workers)}
    """


@pytest.mark.ssh
def test_every_host_answers(sshd, cluster):
    head, worker = sshd["hosts"]
    results = by_name(check_cluster(cluster(local_yaml(head, [worker], sshd["key"]))), "ssh")
    assert [(r.status, r.field) for r in results] == [
        (OK, "provider.head_ip"), (OK, "provider.worker_ips.0")]
    assert f"@{head} answers on SSH" in results[0].detail


@pytest.mark.ssh
def test_a_relative_key_starts_at_the_cluster_files_folder(sshd, cluster, monkeypatch):
    head, _ = sshd["hosts"]
    monkeypatch.chdir("/")   # not where the file is: the key must be found beside the file
    results = by_name(check_cluster(cluster(local_yaml(head, [], sshd["key"].name))), "ssh")
    assert [r.status for r in results] == [OK], results


@pytest.mark.ssh
def test_a_host_that_does_not_answer_is_named_with_its_line(sshd, cluster):
    head, _ = sshd["hosts"]
    spec = cluster(local_yaml(head, [sshd["unused"]], sshd["key"]))
    results = by_name(check_cluster(spec), "ssh")
    assert [r.status for r in results] == [OK, FAIL]
    assert sshd["unused"] in results[1].detail and "Connection refused" in results[1].detail
    assert results[1].field == "provider.worker_ips.0" and results[1].line == 5


@pytest.mark.ssh
def test_a_key_the_hosts_do_not_accept(sshd, cluster, tmp_path):
    other = _keygen(tmp_path / "other_key")
    results = by_name(check_cluster(cluster(local_yaml(*sshd["hosts"][:1], [], other))), "ssh")
    assert [r.status for r in results] == [FAIL]
    assert "Permission denied" in results[0].detail
    assert "authorized_keys" in results[0].hint


def test_missing_key_file_fails_before_any_connection(cluster, tmp_path):
    # Loaded as `validate` loads it (a missing key is a warning there); `up` refuses it earlier.
    spec = cluster(local_yaml("127.0.0.1", [], tmp_path / "no-such-key"), here=False)
    result = only(check_cluster(spec), "ssh key")
    assert result.status == FAIL and result.field == "auth.ssh_private_key" and result.line == 8


def test_not_joined_names_the_hosts_missing_from_the_alive_nodes():
    from orchestrator import providers

    config = {"provider": {"type": "local", "head_ip": "10.0.0.1",
                           "worker_ips": ["10.0.0.2", "localhost"]}}
    local = providers.get("local")
    assert local.not_joined(config, ("10.0.0.1",)) == ["10.0.0.2", "localhost"]
    assert local.not_joined(config, ("10.0.0.1", "10.0.0.2", "127.0.0.1")) == []  # by address
    assert providers.get("aws").not_joined({"provider": {"type": "aws"}}, ()) == []


def _stop_ray_with(tmp_path, running: list[bool], pgrep: bool = True) -> list[str]:
    """Run local.STOP_RAY in bash with stand-ins for `ray`, `pgrep` and `pkill` that log their
    calls; `running[i]` is what the i-th look for Ray processes finds."""
    from orchestrator.providers.local import STOP_RAY

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "calls"
    answers = tmp_path / "answers"
    answers.write_text("".join("0\n" if busy else "1\n" for busy in running))
    tools = {"ray": 'echo "ray $*" >> "$LOG"', "pkill": 'echo "pkill $*" >> "$LOG"'}
    if pgrep:
        tools["pgrep"] = ('echo pgrep >> "$LOG"; code=$(head -n 1 "$ANSWERS"); '
                          'sed -i 1d "$ANSWERS"; exit "${code:-1}"')
    for name, body in tools.items():
        (bin_ / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_ / name).chmod(0o755)
    path = f"{bin_}:/usr/bin:/bin" if pgrep else str(bin_)
    for tool in ("head", "sed", "id", "sleep") if not pgrep else ():
        (bin_ / tool).symlink_to(shutil.which(tool))
    subprocess.run(["/bin/bash", "-c", STOP_RAY], check=True, timeout=30,
                   env={"PATH": path, "LOG": str(log), "ANSWERS": str(answers)})
    return log.read_text().splitlines() if log.exists() else []


def test_a_host_with_no_ray_process_is_not_stopped(tmp_path):
    assert _stop_ray_with(tmp_path, [False, False]) == ["pgrep", "pgrep"]


def test_a_start_on_its_way_to_an_idle_host_is_stopped(tmp_path):
    """Nothing of Ray's at the first look; the head's autoscaler starts Ray there meanwhile."""
    assert _stop_ray_with(tmp_path, [False, True, False]) == [
        "pgrep", "pgrep", "ray stop --grace-period 3", "pgrep"]


def test_ray_is_stopped_once_when_nothing_is_starting(tmp_path):
    assert _stop_ray_with(tmp_path, [True, False]) == [
        "pgrep", "ray stop --grace-period 3", "pgrep"]


def test_a_ray_start_in_flight_is_ended_and_ray_stopped_again(tmp_path):
    assert _stop_ray_with(tmp_path, [True, True]) == [
        "pgrep", "ray stop --grace-period 3", "pgrep", f"pkill -u {os.geteuid()} -f [r]ay start",
        "ray stop --force"]


def test_a_host_without_pgrep_is_stopped_twice(tmp_path):
    assert _stop_ray_with(tmp_path, [], pgrep=False) == [
        "ray stop --grace-period 3", f"pkill -u {os.geteuid()} -f [r]ay start", "ray stop --force"]


def test_the_pattern_finds_every_process_ray_stop_ends_and_not_the_shell_running_it():
    """pgrep's extended regex on the command lines Ray's processes have (`ray stop` picks its
    victims by these keywords), on a `ray start` in flight, and not on the shell that runs the
    stop (its command line holds the pattern) nor on other Python programs."""
    from ray.autoscaler._private.constants import RAY_PROCESSES

    from orchestrator.providers.local import ANY_RAY, STOP_RAY

    site = "/opt/venv/lib/python3.11/site-packages/ray"
    lines = [f"/opt/venv/bin/python {site}/x/{keyword} --session-dir=/tmp/ray/s"
             for keyword, _ in RAY_PROCESSES]
    lines += [f"{site}/core/src/ray/gcs/gcs_server --log_dir=/tmp/ray/s/logs",
              "ray::IDLE", "ray::RayTrainWorker.train_fn",
              "/opt/venv/bin/python /opt/venv/bin/ray start --address=10.0.0.1:6379",
              "bash --login -c -i source ~/.bashrc; ray start --head --port=6379"]
    assert [line for line in lines if not re.search(ANY_RAY, line)] == []
    for other in (f"bash -c {STOP_RAY}", "/usr/bin/python3 -m http.server",
                  "/opt/venv/bin/python -m orchestrator.head.autostop", "sshd: root@notty"):
        assert not re.search(ANY_RAY, other), other
