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
