"""Failures over real SSH: each gives a clear message, a record saying where things stand, and
a `down` that cleans up (no Ray process of the cluster left)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import yaml

from orchestrator.util.waiting import until

from .conftest import cli_env, orchestrate
from .hosts import sh

pytestmark = [pytest.mark.ssh]


@pytest.fixture(scope="module")
def machine(make_machine):
    # A head alone: every failure here happens on the way to (or on) the head.
    return make_machine(count=1)


@pytest.fixture
def env(tmp_path):
    # Ray waits up to this long for SSH on a node: keep failures quick in tests.
    env = {**cli_env(tmp_path / "home"), "AUTOSCALER_NODE_START_WAIT_S": "10"}
    yield env
    # A test that failed before its own `down` leaves no cluster running for the next one.
    for name in sorted((tmp_path / "home" / "clusters").glob("*/record.json")):
        orchestrate(env, "down", name.parent.name, "-y")


def record_of(env, name) -> dict | None:
    done = orchestrate(env, "status", "--format", "json")
    rows = [r for r in json.loads(done.stdout) if r["name"] == name]
    return rows[0] if rows else None


def down_cleans_up(env, name, machine, target: str | None = None) -> None:
    """`down` of the cluster by its name (or `target`: its file), then nothing of it is left."""
    done = orchestrate(env, "down", target or name, "-y")
    assert done.returncode == 0, done.stderr
    assert f"cluster {name} is down and forgotten" in done.stderr
    assert record_of(env, name) is None
    left = lambda: machine.ray_pids("ray|gcs_server|raylet")  # noqa: E731
    assert until(lambda: not left(), timeout=30), f"Ray processes left after down: {left()}"


def test_wrong_key(machine, env, tmp_path):
    other = tmp_path / "other_key"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other))
    name = f"key-{machine.name}"
    path = machine.cluster_file(name, auth={"ssh_user": "root",
                                            "ssh_private_key": str(other)})
    done = orchestrate(env, "up", str(path), "-y", "--skip-preflight", timeout=300)
    assert done.returncode == 1
    assert "SSH refused the key" in done.stderr and "Traceback" not in done.stderr
    record = record_of(env, name)
    assert record["state"] == "failed" and "SSH refused the key" in record["message"]
    down_cleans_up(env, name, machine)


def test_unreachable_head(machine, env):
    name = f"unreach-{machine.name}"
    nobody = machine.ips[0].rsplit(".", 1)[0] + ".9"   # on the test's bridge, no host there
    path = machine.cluster_file(name, provider={"type": "local", "head_ip": nobody,
                                                "worker_ips": machine.ips[1:]})
    done = orchestrate(env, "up", str(path), "-y", "--skip-preflight", timeout=300)
    assert done.returncode == 1
    assert "a node cannot be reached" in done.stderr or "does not answer on SSH" in done.stderr
    assert record_of(env, name)["state"] == "failed"
    down_cleans_up(env, name, machine)


def test_ray_up_failing_after_ray_started_on_the_head(machine, env):
    name = f"mid-{machine.name}"
    path = machine.cluster_file(name)
    config = yaml.safe_load(path.read_text())
    # Ray's own default start commands (ray/autoscaler/local/defaults.yaml), then a failure.
    config["head_start_ray_commands"] = [
        "ray stop",
        "ulimit -c unlimited; ray start --head --port=6379 "
        "--autoscaling-config=~/ray_bootstrap_config.yaml",
        "echo setup broke >&2; exit 7"]
    path.write_text(yaml.safe_dump(config))
    before = machine.ray_pids("gcs_server")
    done = orchestrate(env, "up", str(path), "-y", "--skip-preflight", timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"`orchestrate down {name}` removes them" in done.stderr   # how to clean up
    assert record_of(env, name)["state"] == "failed"
    # This cluster's `ray up` started Ray on the head (not a process left by an earlier test).
    head = machine.hosts[0].name
    started = machine.ray_pids("gcs_server") - before
    assert len(started) == 1 and started.pop().startswith(f"{head}:"), machine.ray_processes()
    down_cleans_up(env, name, machine)


def test_ray_up_that_outlasts_its_timeout_is_stopped(machine, env):
    name = f"slow-{machine.name}"
    path = machine.cluster_file(name, head_setup_commands=["sleep 300"])
    done = orchestrate(env, "up", str(path), "-y", "--skip-preflight", "--timeout", "5",
                       timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "ERROR `ray up` did not finish within 5 s and was stopped" in done.stderr
    assert f"`orchestrate down {name}` removes them" in done.stderr
    record = record_of(env, name)
    assert record["state"] == "failed"
    assert record["message"] == "`ray up` did not finish within 5 s and was stopped"
    left = subprocess.run(["pgrep", "-f", f"ray.scripts.scripts up .*{name}"],
                          capture_output=True, text=True)
    assert left.stdout.strip() == ""   # no `ray up` of ours goes on after the timeout
    down_cleans_up(env, name, machine, target=str(path))   # `down FILE`


def test_ctrl_c_during_up(machine, env, tmp_path):
    name = f"intr-{machine.name}"
    path = machine.cluster_file(name)
    logins = machine.accepted_logins()
    process = subprocess.Popen([sys.executable, "-m", "orchestrator", "up", str(path), "-y",
                                "--skip-preflight"], env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Interrupt once `ray up` is working on the head over SSH.
        assert until(lambda: machine.accepted_logins() > logins, timeout=120)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert record_of(env, name)["state"] == "interrupted"
    # No `ray up` of ours is left running.
    left = subprocess.run(["pgrep", "-f", f"ray.scripts.scripts up .*{name}"],
                          capture_output=True, text=True)
    assert left.stdout.strip() == ""
    # The worst moment for the Ctrl-C: Ray rewrites its node list in place, and a stop between
    # the truncate and the write leaves it empty. `down` must get past that too.
    nodes = tmp_path / "home" / "clusters" / name / "launcher" / "ray" / f"cluster-{name}.state"
    assert nodes.exists()
    nodes.write_text("")
    time.sleep(1)
    down_cleans_up(env, name, machine)
