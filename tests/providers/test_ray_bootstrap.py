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


def test_our_ssh_uses_the_key_pair_rays_bootstrap_made(aws, cluster, tmp_path, monkeypatch, state):
    """Issue 52: a cluster file naming no `ssh_private_key` (Ray's AWS bootstrap makes the key
    pair, as for cluster_configs/aws-gpu.yaml). `ray up` resolves the config through Ray's
    `_bootstrap_config`, whose cache lands in the cluster's scratch folder (TMPDIR of every `ray`
    we run); the forward, `exec` and `status` (head.auth) must log in with the key it made."""
    import json
    import tempfile

    import ray.autoscaler._private.aws.config as ray_aws
    from ray.autoscaler._private import commands

    from orchestrator.launch import head, launcher_auth
    from orchestrator.render.cluster import render_cluster
    from orchestrator.state import ClusterRecord

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(ray_aws.time, "sleep", lambda seconds: None)
    spec = cluster(aws_yaml(zones="us-west-2a"))
    token = tmp_path / "token"
    token.write_text("t" * 32)
    rendered = render_cluster(spec, token_file=str(token)).config
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
