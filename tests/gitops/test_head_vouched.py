"""A cloud cluster's head address in a project's state is data anyone who can write the state can
change: `plan` and `apply` reach the head only at an address the cloud (asked with this
machine's credentials, in the region of the repository's file) or a host key this machine
pinned vouches for. Never at one only the state names: the token travels there.

`orchestrate plan` / `apply` run for real as subprocesses on the file backend. `ssh` first on
their PATH is a recorder: it writes down its arguments (and the known_hosts file it was handed)
and fails as an unreachable host would, so nothing connects anywhere. AWS's API is moto's
server on loopback (AWS faked at the wire; Ray's own launcher code asks it which instance is
the head). Without credentials, nothing is sent: botocore refuses before any request.
"""
from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from orchestrator.gitops.store import ProjectState
from orchestrator.language.project import load_project
from orchestrator.state import ClusterRecord, State, cluster_key

from ..moto_server import REGION as MOTO_REGION
from ..moto_server import aws_env, moto_server  # noqa: F401 - fixtures
from .test_commands import cli
from .test_cost import REGION, aws
from .test_planner import Project, applied, experiment

STATE_SAYS = "127.0.0.9"   # a state writer's address (loopback: a test's traffic stays here)
RECORDER = """#!/bin/sh
# ssh, as a recorder: what it was asked to do, and the known_hosts it was to check; then the
# answer of a host that does not answer.
for arg in "$@"; do
  case "$arg" in UserKnownHostsFile=*) cat "${arg#UserKnownHostsFile=}" >> LOG.keys ;; esac
done
echo "$*" >> LOG
echo "ssh: connect to host: Connection refused" >&2
exit 255
"""


@pytest.fixture
def project(tmp_path, monkeypatch) -> Project:
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "ssh.log"
    (bin_ / "ssh").write_text(RECORDER.replace("LOG", shlex.quote(str(log))))
    (bin_ / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    project = Project(tmp_path / "repo")
    project.write("clusters", "gpu", aws("gpu"))
    project.write("experiments", "mnist", experiment("mnist", "../clusters/gpu.yaml"))
    return project


def state_naming(project: Project, head: str) -> None:
    """The state as an apply left it, the cluster's head address then set to `head`."""
    ps = ProjectState.open(load_project(project.root / "orchestrate.yaml"), State.here())
    doc = ps.read()
    if "cluster/gpu" not in doc.resources:
        doc = applied(project)
    entry = doc.resources["cluster/gpu"]
    entry["provider"] = "aws"
    entry["record"].update(head_ip=head, dashboard_host="127.0.0.1")
    ps.write(doc)
    State.here().secrets.ensure(cluster_key("gpu"))   # this machine holds the cluster's token


def ssh_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "ssh.log"
    return log.read_text().splitlines() if log.exists() else []


def head_instance(server, address_of: str = "public") -> str:
    """A running instance with Ray's head tags for cluster gpu, in the file's region."""
    import boto3

    ec2 = boto3.client("ec2", endpoint_url=server.url, region_name=REGION,
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    made = ec2.run_instances(
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="m5.2xlarge",
        TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": "ray-cluster-name", "Value": "gpu"},
            {"Key": "ray-node-type", "Value": "head"},
            {"Key": "ray-node-status", "Value": "up-to-date"}]}])["Instances"][0]
    return made["PublicIpAddress"] if address_of == "public" else made["PrivateIpAddress"]


def test_plan_and_apply_send_nothing_to_a_head_only_the_state_names(project, tmp_path):
    state_naming(project, STATE_SAYS)
    done = cli(project, "plan")
    assert done.returncode == 0, done.stderr
    calls = ssh_calls(tmp_path)
    assert not [c for c in calls if STATE_SAYS in c], f"plan reached the state's address: {calls}"
    assert f"the state says its head is {STATE_SAYS}, and nothing vouches for that address" \
        in done.stdout, done.stdout
    assert f"AWS {REGION} could not be asked" in done.stdout
    assert "ec2:DescribeInstances" in done.stdout
    # a runner that never reached the cluster keeps nothing of it (not even an empty folder)
    assert not (tmp_path / "home" / "clusters").exists()

    # apply: the experiment changed, so it would be submitted to the cluster: refused, named
    project.write("experiments", "mnist", experiment("mnist", "../clusters/gpu.yaml", epochs=2))
    done = cli(project, "apply", "-y")
    assert done.returncode != 0
    assert not [c for c in ssh_calls(tmp_path) if STATE_SAYS in c], ssh_calls(tmp_path)
    assert "cluster 'gpu': the state says its head is 127.0.0.9, and nothing vouches" \
        in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_cloud_names_the_head_and_the_states_other_address_is_not_reached(
        project, tmp_path, aws_env, monkeypatch):  # noqa: F811
    assert MOTO_REGION != REGION   # asked where the file says, not in the default region
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    head = head_instance(aws_env)
    state_naming(project, STATE_SAYS)
    done = cli(project, "plan")
    assert done.returncode == 0, done.stderr
    calls = ssh_calls(tmp_path)
    assert not [c for c in calls if STATE_SAYS in c], calls
    assert [c for c in calls if c.endswith(f"ubuntu@{head}")], calls   # the cloud's head, asked
    assert f"the state says its head is {STATE_SAYS}, AWS {REGION} says {head}" in done.stdout

    (tmp_path / "ssh.log").unlink()
    state_naming(project, head)
    done = cli(project, "plan")
    assert [c for c in ssh_calls(tmp_path) if c.endswith(f"ubuntu@{head}")], ssh_calls(tmp_path)
    assert "the state says its head" not in done.stdout


def test_a_head_this_machine_pinned_is_reached_with_its_pin(project, tmp_path):
    state_naming(project, STATE_SAYS)
    # this machine reached that head before: it records the cluster and pinned the head's key
    State.here().store.write_cluster(ClusterRecord(
        name="gpu", provider="aws", file=str(project.root / "clusters" / "gpu.yaml"),
        config_hash="", state="up", head_ip=STATE_SAYS, dashboard_host="127.0.0.1"))
    pin = f"{STATE_SAYS} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
    (State.here().store.workspace("gpu") / "known_hosts").write_text(pin)
    done = cli(project, "plan")
    assert done.returncode == 0, done.stderr
    calls = ssh_calls(tmp_path)
    assert [c for c in calls if c.endswith(f"ubuntu@{STATE_SAYS}")], calls
    assert "StrictHostKeyChecking=accept-new" in calls[0]
    # ssh was handed this machine's pin for it: a host there with another key is refused
    assert (tmp_path / "ssh.log.keys").read_text() == pin
    assert "nothing vouches" not in done.stdout


def test_a_kuberay_cluster_is_reached_only_in_the_namespace_of_its_file(tmp_path, monkeypatch):
    from orchestrator.gitops.vouch import head_of

    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    file = {"cluster_name": "kr", "provider": {"type": "kuberay", "namespace": "ml"}}
    state = {"cluster_name": "kr", "provider": {"type": "kuberay", "namespace": "theirs"}}
    moved = head_of("kr", "kuberay", "10.1.2.3", state, file, State.here(), "cluster/kr")
    assert moved.address is None and moved.refused == (
        "cluster/kr places cluster 'kr' in namespace 'theirs', its file in 'ml': orchestrate "
        "reaches it only where its file says")
    same = head_of("kr", "kuberay", "10.1.2.3", file, file, State.here(), "cluster/kr")
    assert same.refused is None and same.by == "kubernetes"
