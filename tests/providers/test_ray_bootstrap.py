"""The rendered AWS config is one Ray can launch: Ray's own AWS bootstrap (IAM role, security
group, subnets, key pair) runs against the same moto server the preflight checked."""
from __future__ import annotations

import os

from orchestrator.providers import check_cluster, failures

from .test_aws import aws_yaml


def test_rendered_cluster_passes_preflight_and_rays_aws_bootstrap(aws, cluster, tmp_path, monkeypatch):
    import ray.autoscaler._private.aws.config as ray_aws
    from ray.autoscaler._private.util import prepare_config, validate_config

    from orchestrator.render.cluster import render_cluster

    monkeypatch.setenv("HOME", str(tmp_path))  # Ray writes ~/.ssh/ray-autoscaler_<region>.pem
    monkeypatch.setattr(ray_aws.time, "sleep", lambda seconds: None)  # 2 x 15 s IAM propagation waits
    spec = cluster(aws_yaml(zones="us-west-2a,us-west-2b"))
    assert failures(check_cluster(spec)) == []
    token = tmp_path / "token"
    token.write_text("t" * 32)

    config = prepare_config(render_cluster(spec, token_file=str(token)).config)
    validate_config(config)
    ec2 = aws.client("ec2")
    # moto was reset for this module: what Ray creates below is not left from another test
    assert aws.client("iam").list_instance_profiles()["InstanceProfiles"] == []
    assert not [g for g in ec2.describe_security_groups()["SecurityGroups"]
                if g["GroupName"].startswith("ray-autoscaler")]
    booted = ray_aws.bootstrap_aws(config)

    for name in ("head", "worker"):
        node = booted["available_node_types"][name]["node_config"]
        subnets = ec2.describe_subnets(SubnetIds=node["SubnetIds"])["Subnets"]
        assert {s["AvailabilityZone"] for s in subnets} == {"us-west-2a", "us-west-2b"}
        groups = ec2.describe_security_groups(GroupIds=node["SecurityGroupIds"])["SecurityGroups"]
        assert [g["GroupName"] for g in groups] == ["ray-autoscaler-preflight-aws"]
        assert ec2.describe_key_pairs(KeyNames=[node["KeyName"]])["KeyPairs"]
    # Ray gives the head (only the head node, not its type) the IAM role it created
    assert booted["head_node"]["IamInstanceProfile"]["Arn"].endswith(":instance-profile/ray-autoscaler-v1")
    assert os.path.exists(booted["auth"]["ssh_private_key"])


def _no_key_named(cluster, tmp_path, monkeypatch):
    """An AWS file naming no key, rendered; HOME in tmp_path (Ray writes its key pair there)."""
    import ray.autoscaler._private.aws.config as ray_aws

    from orchestrator.render.cluster import render_cluster

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(ray_aws.time, "sleep", lambda seconds: None)
    spec = cluster(aws_yaml(zones="us-west-2a"))
    token = tmp_path / "token"
    token.write_text("t" * 32)
    return spec, render_cluster(spec, token_file=str(token)).config


def test_our_ssh_uses_the_key_pair_rays_bootstrap_made(aws, cluster, tmp_path, monkeypatch, state):
    """Issue 52: a cluster file naming no `ssh_private_key` (Ray's AWS bootstrap makes the key
    pair, as for cluster_configs/aws-gpu.yaml). `ray up` resolves the config through Ray's
    `_bootstrap_config`, whose cache lands in the cluster's scratch folder (TMPDIR of every `ray`
    we run); the forward, `exec` and `status` (head.auth) must log in with the key it made."""
    import json
    import tempfile

    from ray.autoscaler._private import commands

    from orchestrator.launch.ray_up import head, launcher_auth
    from orchestrator.state import ClusterRecord

    spec, rendered = _no_key_named(cluster, tmp_path, monkeypatch)
    assert "ssh_private_key" not in rendered["auth"]
    name = rendered["cluster_name"]
    state.store.write_cluster(ClusterRecord(name=name, provider="aws", file=str(spec.path),
                                            config_hash="x", head_ip="10.0.0.5"))
    state.store.write_rendered(name, rendered)
    scratch = state.store.workspace(name) / "launcher"
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))   # TMPDIR of the `ray up` we run

    booted = commands._bootstrap_config(rendered)             # what `ray up` does first
    made = booted["auth"]["ssh_private_key"]
    # ray-autoscaler_us-west-2.pem, or ray-autoscaler_N_us-west-2.pem where moto holds a pair of
    # that name from the test before, whose key is not in this HOME
    assert os.path.basename(made).startswith("ray-autoscaler_") and os.path.exists(made)
    assert made.startswith(str(tmp_path / "home" / ".ssh"))

    assert launcher_auth.keep(state, name) == {"ssh_user": "ubuntu", "ssh_private_key": made}
    record = state.store.read_cluster(name)
    assert head.auth(record, state)["ssh_private_key"] == made
    kept = state.store.workspace(name) / launcher_auth.FILE
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    assert "PRIVATE KEY" not in kept.read_text()               # the path, never the key
    assert json.loads(kept.read_text())["ssh_private_key"] == made
    # A key the file names is never replaced by the one Ray made
    named = dict(rendered, auth={"ssh_user": "ubuntu", "ssh_private_key": "/keys/mine.pem"})
    state.store.write_rendered(name, named)
    assert head.auth(record, state)["ssh_private_key"] == "/keys/mine.pem"


def test_another_runner_finds_the_running_heads_key_pair_where_ray_wrote_it(aws, cluster, tmp_path,
                                                                             monkeypatch):
    """A GitOps runner that never ran `ray up` of the cluster (another did) has no record of the
    key pair Ray's bootstrap made: head.auth asks the cloud for the running head's KeyName and
    uses ~/.ssh/<KeyName>.pem if it is here (a runner sharing the launcher's home), recorded as
    `keep` would; on another machine (no such file), or with no running head, it names none."""
    from ray.autoscaler._private import commands

    from orchestrator.launch.ray_up import head, launcher_auth
    from orchestrator.state import ClusterRecord, State
    from orchestrator.state.folder import FolderStore
    from orchestrator.state.secrets import FileSecrets

    spec, rendered = _no_key_named(cluster, tmp_path, monkeypatch)
    name = rendered["cluster_name"]
    booted = commands._bootstrap_config(rendered)    # the launching runner's `ray up`
    made = booted["auth"]["ssh_private_key"]
    key_name = booted["available_node_types"]["head"]["node_config"]["KeyName"]
    ec2 = aws.client("ec2")
    subnet = booted["available_node_types"]["head"]["node_config"]["SubnetIds"][0]

    def launch_head(key: str) -> str:
        return ec2.run_instances(
            ImageId="ami-12c6146b", InstanceType="m5.large", MinCount=1, MaxCount=1,
            KeyName=key, SubnetId=subnet, TagSpecifications=[{"ResourceType": "instance", "Tags": [
                {"Key": "ray-cluster-name", "Value": name},
                {"Key": "ray-node-type", "Value": "head"}]}])["Instances"][0]["InstanceId"]

    def runner(folder: str) -> tuple[State, ClusterRecord]:
        other = State(FolderStore(tmp_path / folder), FileSecrets(tmp_path / folder / "secrets"))
        record = ClusterRecord(name=name, provider="aws", file=str(spec.path), config_hash="x",
                               head_ip="10.0.0.5")
        other.store.write_cluster(record)
        other.store.write_rendered(name, rendered)
        return other, record

    none_yet, record = runner("none-yet")
    assert "ssh_private_key" not in head.auth(record, none_yet)   # no head runs
    instance = launch_head(key_name)
    b, record = runner("runner-b")
    assert head.auth(record, b)["ssh_private_key"] == made
    assert launcher_auth.read(b, name) == {"ssh_private_key": made}   # recorded, as `keep` does
    kept = b.store.workspace(name) / launcher_auth.FILE
    assert oct(kept.stat().st_mode & 0o777) == "0o600" and "PRIVATE KEY" not in kept.read_text()

    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))          # another machine's runner
    c, record = runner("runner-c")
    assert "ssh_private_key" not in head.auth(record, c)
    ec2.terminate_instances(InstanceIds=[instance])
    launch_head("../../etc/passwd-like")                             # a name is not a path
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    d, record = runner("runner-d")
    assert "ssh_private_key" not in head.auth(record, d)
