"""Autostop's cloud takedown (`head/cloud_down.py`) run as the head runs it, `python -m
head.cloud_down CONFIG`, against moto's EC2 server on loopback: AWS is faked at the wire, Ray's
own AWS node provider and boto3 make every request. Its `ray stop` is the real one, run in a PID
and mount namespace of the test's own (`unshare`, root), where it finds no Ray: another Ray on
this machine is out of its sight, and its `/tmp/ray` is a private tmpfs."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.moto_server import REGION, client, moto_server  # noqa: F401 - a fixture

HEAD_PACKAGE_PARENT = Path(__file__).resolve().parents[2] / "orchestrator"  # ~/.orchestrate there
CLUSTER = "autostop-aws"
BOUND_S = 240   # no SSH step: without one the takedown returns in seconds; an SSH would hang


def bootstrap_config(cache_stopped_nodes: bool | None) -> dict:
    """What Ray's launcher leaves on an AWS head (`~/ray_bootstrap_config.yaml`, written as JSON):
    the bootstrapped config, the key rewritten to the copy on the head, no head_node."""
    provider = {"type": "aws", "region": REGION, "availability_zone": f"{REGION}a"}
    if cache_stopped_nodes is not None:
        provider["cache_stopped_nodes"] = cache_stopped_nodes
    node = {"InstanceType": "m5.large", "ImageId": "ami-0000", "KeyName": "ray-autoscaler_us-east-1",
            "SubnetIds": ["subnet-0000"], "SecurityGroupIds": ["sg-0000"]}
    return {
        "cluster_name": CLUSTER, "max_workers": 2, "idle_timeout_minutes": 5,
        "provider": provider,
        "auth": {"ssh_user": "ubuntu", "ssh_private_key": "~/ray_bootstrap_key.pem"},
        "available_node_types": {
            "ray.head.default": {"node_config": node, "resources": {"CPU": 2},
                                 "min_workers": 0, "max_workers": 0},
            "ray.worker.default": {"node_config": node, "resources": {"CPU": 2},
                                   "min_workers": 2, "max_workers": 2}},
        "head_node_type": "ray.head.default",
        "file_mounts": {"~/.orchestrate/head": "~/.orchestrate/head"},
        "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [],
        "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": ["ray stop", "ray start --head --autoscaling-config="
                                    "~/ray_bootstrap_config.yaml"],
        "worker_start_ray_commands": ["ray stop", "ray start --address=$RAY_HEAD_IP:6379"],
        "metadata": {"orchestrate": {"autostop": {"idle_minutes": 1}}},
        "no_restart": False,
    }


def launch(ec2, image: str, cluster: str | None, kind: str | None) -> str:
    """One instance tagged as Ray's AWS provider tags the nodes it creates (`create_node`)."""
    from ray.autoscaler.tags import (
        TAG_RAY_CLUSTER_NAME,
        TAG_RAY_NODE_KIND,
        TAG_RAY_NODE_STATUS,
        TAG_RAY_USER_NODE_TYPE,
    )

    tags = [{"Key": "Name", "Value": f"ray-{cluster}-{kind}"}] if cluster else []
    if cluster and kind:
        tags += [{"Key": TAG_RAY_CLUSTER_NAME, "Value": cluster},
                 {"Key": TAG_RAY_NODE_KIND, "Value": kind},
                 {"Key": TAG_RAY_NODE_STATUS, "Value": "up-to-date"},
                 {"Key": TAG_RAY_USER_NODE_TYPE, "Value": f"ray.{kind}.default"}]
    extra = {"TagSpecifications": [{"ResourceType": "instance", "Tags": tags}]} if tags else {}
    found = ec2.run_instances(ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1,
                              **extra)
    return found["Instances"][0]["InstanceId"]


def states(ec2) -> dict[str, str]:
    return {i["InstanceId"]: i["State"]["Name"]
            for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}


def run_on_head(config_path: Path, env: dict[str, str], tmp_path: Path):
    """`python -m head.cloud_down` from the head package's parent folder (as from
    ~/.orchestrate), in its own PID and mount namespaces; `ssh` on its PATH only records a call."""
    spy = tmp_path / "bin"
    spy.mkdir()
    (spy / "ssh").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'ssh-called'}\nexit 255\n")
    (spy / "ssh").chmod(0o755)
    unshare = ["unshare", "--pid", "--fork", "--mount", "--mount-proc", "--kill-child"]
    if os.geteuid() != 0:
        unshare.insert(1, "--map-root-user")
    # An autoscaler as Ray starts it on a head (`python .../ray/autoscaler/v2/monitor.py ...`),
    # which the takedown must stop before `ray stop`: it would end the head's instance once
    # the head's raylet stops (issue 52). It ignores nothing: SIGTERM ends it.
    fake = "import time; time.sleep(600)"
    script = ('mkdir -p /tmp/ray && mount -t tmpfs tmpfs /tmp/ray && '
              f'("$1" -c {shlex.quote(fake)} /x/ray/autoscaler/v2/monitor.py &) && exec "$@"')
    command = unshare + ["sh", "-c", script, "sh", sys.executable, "-m", "head.cloud_down",
                         str(config_path)]
    env = {**os.environ, **env, "PATH": f"{spy}:{os.environ['PATH']}"}
    done = subprocess.run(command, cwd=HEAD_PACKAGE_PARENT, env=env, capture_output=True,
                          text=True, timeout=BOUND_S, stdin=subprocess.DEVNULL)
    return done, (tmp_path / "ssh-called")


@pytest.mark.parametrize(("cache_stopped_nodes", "gone"),
                         [(False, "terminated"), (None, "stopped")],
                         ids=["terminate", "ray-default-stops"])
def test_the_head_takes_its_whole_cluster_down_and_nothing_else(
        moto_server, tmp_path, cache_stopped_nodes, gone):  # noqa: F811 - the fixture
    ec2 = client(moto_server, "ec2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    head = launch(ec2, image, CLUSTER, "head")
    workers = [launch(ec2, image, CLUSTER, "worker") for _ in range(2)]
    others = [launch(ec2, image, "another-cluster", "head"),
              launch(ec2, image, "another-cluster", "worker"), launch(ec2, image, None, None)]
    config = tmp_path / "ray_bootstrap_config.yaml"
    config.write_text(json.dumps(bootstrap_config(cache_stopped_nodes)))

    done, ssh_called = run_on_head(config, moto_server.env, tmp_path)

    assert done.returncode == 0, done.stderr
    after = states(ec2)
    assert {after[i] for i in [head, *workers]} == {gone}, after
    assert {after[i] for i in others} == {"running"}
    assert not ssh_called.exists(), ssh_called.read_text()
    log = done.stderr
    assert "`ray stop` exited 0" in log and "Did not find any active Ray processes" in log
    # the autoscaler stopped before Ray (it would end this head while the workers are removed)
    assert log.index("Ray's autoscaler stopped") < log.index("`ray stop` exited")
    # the head goes last, and that is said before it is asked
    assert log.index(workers[0]) < log.index(f"removing the head {head}")


def test_a_head_its_tags_do_not_find_is_a_failed_takedown_not_a_done_one(
        moto_server, tmp_path):  # noqa: F811 - the fixture
    """The takedown runs on the head: not finding it by its tags cannot mean it is gone, so
    the watcher must not record the cluster as stopped (it retries, and status says so)."""
    ec2 = client(moto_server, "ec2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    worker = launch(ec2, image, CLUSTER, "worker")
    untagged_head = launch(ec2, image, None, None)
    config = tmp_path / "ray_bootstrap_config.yaml"
    config.write_text(json.dumps(bootstrap_config(False)))

    done, _ = run_on_head(config, moto_server.env, tmp_path)

    assert done.returncode == 1, done.stderr
    assert "was not found among the cluster's nodes" in done.stderr
    after = states(ec2)
    assert after[worker] == "terminated" and after[untagged_head] == "running"


@pytest.mark.parametrize("args", [["head.cloud_down", "/home/ubuntu/ray_bootstrap_config.yaml"],
                                  ["head.autostop"]], ids=["cloud_down", "autostop"])
def test_the_takedown_is_not_a_process_ray_stop_would_kill(args):
    """`ray stop` picks processes by name or command line (Ray's RAY_PROCESSES): the takedown's
    must match none, or it would kill itself before removing a node. Under autostop the
    takedown runs inside the watcher (`python -m head.autostop`), and on-prem the watcher runs
    `ray stop` on its own head."""
    from ray.autoscaler._private.constants import RAY_PROCESSES

    argv = [sys.executable, "-m", *args]   # as render/cluster.py's WATCHER_START runs it
    line = subprocess.list2cmdline(argv)
    name = Path(sys.executable).name[:15]
    matches = [keyword for keyword, by_name in RAY_PROCESSES
               if keyword in (name if by_name else line)]
    assert matches == []


def test_an_unreadable_bootstrap_config_is_said_and_removes_nothing(tmp_path):
    from orchestrator.head import cloud_down

    said: list[str] = []
    assert cloud_down.down(str(tmp_path / "missing.yaml"), said.append) == 1
    assert "taking the cluster down" in said[0]
    assert "cannot read the bootstrap config" in said[-1]
