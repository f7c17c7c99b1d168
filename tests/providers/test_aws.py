"""AWS preflight against moto's server mode on loopback (boto3 via AWS_ENDPOINT_URL).

moto knows the real instance-type offerings per zone (g5.xlarge: us-west-2a/b/c, not d) and
ships a list of AMIs; it has no EC2 vCPU quotas, so the quota checks are driven against the
wire-level fake with recorded Service Quotas responses (AWS_ENDPOINT_URL_SERVICE_QUOTAS).
"""
from __future__ import annotations

import json

import pytest

from orchestrator.errors import PreflightError
from orchestrator.providers import FAIL, OK, WARN, check_cluster, ensure_ready

from .conftest import by_name, only

UBUNTU_X86 = "ami-785db401"
AL2022_ARM = "ami-0e9271c829888680e"


def aws_yaml(zones="us-west-2a,us-west-2b", worker="g5.xlarge", image=UBUNTU_X86,
             region="us-west-2", key_lines="", auth_extra="", spot=False, worker_lines=""):
    market = "\n          InstanceMarketOptions: {MarketType: spot}" if spot else ""
    return f"""
    cluster_name: preflight-aws
    max_workers: 8
    provider:
      type: aws
      region: {region}
      availability_zone: {zones}
    auth:
      ssh_user: ubuntu{auth_extra}
    available_node_types:
      head:
        node_config:
          InstanceType: m5.large
          ImageId: {image}{key_lines}
        resources: {{}}
      worker:
        node_config:
          InstanceType: {worker}
          ImageId: {UBUNTU_X86}{market}{worker_lines}
        resources: {{}}
        min_workers: 0
        max_workers: 8
    head_node_type: head
    """


def test_a_launchable_cluster_passes(aws, cluster):
    results = check_cluster(cluster(aws_yaml()))
    assert only(results, "credentials").status == OK
    assert "123456789012" in only(results, "credentials").detail
    assert only(results, "region").status == OK
    assert [r.status for r in by_name(results, "instance type")] == [OK, OK]
    assert [r.status for r in by_name(results, "image")] == [OK, OK]
    # moto has no EC2 vCPU quotas: the API refuses, so the check warns instead of failing
    quota = by_name(results, "vCPU quota")
    assert quota and all(r.status == WARN for r in quota)
    assert all(r.status != FAIL for r in results)


def test_unknown_region_names_the_field_and_close_regions(aws, cluster):
    spec = cluster(aws_yaml(region="us-west-9", zones="us-west-9a"))
    result = only(check_cluster(spec), "region")
    assert result.status == FAIL
    assert "us-west-9" in result.detail
    assert result.field == "provider.region" and result.line == 5
    assert "us-west-2" in result.hint


def test_zone_outside_the_region_lists_the_region_zones(aws, cluster):
    result = only(check_cluster(cluster(aws_yaml(zones="us-west-2a,us-east-1a"))), "availability zone")
    assert result.status == FAIL
    assert "us-east-1a" in result.detail
    assert result.field == "provider.availability_zone" and result.line == 6
    assert "us-west-2a, us-west-2b, us-west-2c, us-west-2d" in result.hint


def test_instance_type_not_offered_in_the_zone_names_the_zones_that_offer_it(aws, cluster):
    spec = cluster(aws_yaml(zones="us-west-2d"))
    results = check_cluster(spec)
    bad = [r for r in by_name(results, "instance type") if r.status == FAIL]
    assert len(bad) == 1
    assert "g5.xlarge" in bad[0].detail and "us-west-2d" in bad[0].detail
    assert "us-west-2a, us-west-2b, us-west-2c" in bad[0].hint
    assert bad[0].field == "available_node_types.worker.node_config.InstanceType"
    where = ("available_node_types", "worker", "node_config", "InstanceType")
    assert bad[0].line == spec.line_of(where) == 17


def test_instance_type_offered_in_only_some_zones_warns(aws, cluster):
    results = check_cluster(cluster(aws_yaml(zones="us-west-2c,us-west-2d")))
    warned = [r for r in by_name(results, "instance type") if r.status == WARN]
    assert len(warned) == 1 and "us-west-2d" in warned[0].detail


def test_misspelt_instance_type_suggests_the_real_one(aws, cluster):
    result = [r for r in check_cluster(cluster(aws_yaml(worker="g5.xlargee")))
              if r.name == "instance type" and r.status == FAIL][0]
    assert "'g5.xlargee' is not an EC2 instance type" in result.detail
    assert "g5.xlarge" in result.hint


def test_missing_image_fails_with_the_field_and_line(aws, cluster):
    spec = cluster(aws_yaml(image="ami-12345678"))
    result = [r for r in check_cluster(spec) if r.name == "image" and r.status == FAIL][0]
    assert "ami-12345678" in result.detail and "us-west-2" in result.detail
    assert result.field == "available_node_types.head.node_config.ImageId" and result.line == 13


def test_image_of_the_wrong_architecture_fails(aws, cluster):
    result = [r for r in check_cluster(cluster(aws_yaml(image=AL2022_ARM)))
              if r.name == "image" and r.status == FAIL][0]
    assert "arm64" in result.detail and "x86_64" in result.detail


def test_missing_key_pair_lists_the_existing_ones(aws, cluster, tmp_path):
    aws.client("ec2").create_key_pair(KeyName="team-key-1")
    pem = tmp_path / "k.pem"
    pem.write_text("not really a key")
    spec = cluster(aws_yaml(key_lines="\n          KeyName: nobodys-key",
                            auth_extra=f"\n      ssh_private_key: {pem}"))
    result = only(check_cluster(spec), "key pair")
    assert result.status == FAIL
    assert result.detail == "key pair 'nobodys-key' does not exist in us-west-2"
    # moto was reset for this module: the one key pair there is this test's
    assert result.hint == "existing key pairs: team-key-1; or drop KeyName and Ray creates one"
    assert result.field == "available_node_types.head.node_config.KeyName" and result.line == 15


def test_existing_key_pair_needs_its_private_key_file(aws, cluster):
    aws.client("ec2").create_key_pair(KeyName="team-key-2")
    spec = cluster(aws_yaml(key_lines="\n          KeyName: team-key-2",
                            auth_extra="\n      ssh_private_key: /nonexistent/team-key.pem"),
                   here=False)   # as `validate` loads it; `up` refuses the missing key earlier
    results = check_cluster(spec)
    assert only(results, "key pair").status == OK
    result = only(results, "ssh key")
    assert result.status == FAIL and result.field == "auth.ssh_private_key"


def test_without_credentials_nothing_else_is_tried(aws, cluster, monkeypatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    results = check_cluster(cluster(aws_yaml()))
    assert [(r.name, r.status) for r in results] == [("credentials", FAIL)]
    assert "aws configure" in results[0].hint


def test_ensure_ready_raises_with_every_failure(aws, cluster):
    spec = cluster(aws_yaml(zones="us-west-2d", image="ami-12345678"))
    with pytest.raises(PreflightError) as raised:
        ensure_ready(spec)
    message = raised.value.message
    assert "2 problems" in message
    assert f"{spec.path}:17: available_node_types.worker.node_config.InstanceType:" in message
    assert "ami-12345678" in message
    assert "--skip-preflight" in raised.value.hint


@pytest.fixture
def quotas(aws, fake_cloud, monkeypatch):
    """Service Quotas answered from recorded GetServiceQuota replies (moto has no EC2 quotas)."""
    limits = {"L-3819A6DF": 8.0}

    def get_service_quota(request):
        assert request["headers"]["x-amz-target"] == "ServiceQuotasV20190624.GetServiceQuota"
        code = json.loads(request["body"])["QuotaCode"]
        if code == "L-1216C47A":
            return 200, fake_cloud.recorded("aws/get-service-quota-L-1216C47A.json")
        if code in limits:
            return 200, fake_cloud.recorded(f"aws/get-service-quota-{code}.json", value=limits[code])
        return 400, fake_cloud.recorded("aws/no-such-resource.json")

    fake_cloud.route("POST", "/", get_service_quota)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", fake_cloud.url)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(fake_cloud.cert))
    return limits


def test_spot_gpu_quota_too_small_for_max_workers_fails(quotas, cluster):
    spec = cluster(aws_yaml(spot=True))
    results = by_name(check_cluster(spec), "vCPU quota")
    # head m5.large: 2 vCPUs of the Standard on-demand 32; 8 spot g5.xlarge: 32 vCPUs of 8
    assert any(r.status == OK and "Standard" in r.detail and "needs 2, 32 free" in r.detail
               for r in results)
    failed = [r for r in results if r.status == FAIL]
    assert len(failed) == 1
    assert "needs 32 vCPUs of 'All G and VT Spot Instance Requests' in us-west-2; 8 free" \
        in failed[0].detail
    assert "L-3819A6DF" in failed[0].hint and failed[0].field == "max_workers"


def test_spot_gpu_quota_large_enough_passes(quotas, cluster):
    quotas["L-3819A6DF"] = 64.0
    results = by_name(check_cluster(cluster(aws_yaml(spot=True))), "vCPU quota")
    assert [r.status for r in results] == [OK, OK]


def test_rejected_credentials_stop_before_any_ec2_call(aws, fake_cloud, cluster, monkeypatch):
    """moto accepts any key, so STS's refusal is replayed from a recorded reply at the wire."""
    fake_cloud.route("POST", "/", fake_cloud.recorded("aws/sts-invalid-client-token-id.xml"), 403)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", fake_cloud.url)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(fake_cloud.cert))
    results = check_cluster(cluster(aws_yaml()))
    assert [(r.name, r.status) for r in results] == [("credentials", FAIL)]
    assert results[0].detail == "AWS rejected the credentials (InvalidClientTokenId)"
    assert "Action=GetCallerIdentity" in fake_cloud.requests[0]["body"]


AUTOSTOP = "autostop: {idle_minutes: 30}\n"  # after the text's last line, "    "


def head_profile(aws, name: str, policy: dict | None = None, managed: str | None = None) -> None:
    """An instance profile in moto's IAM whose role has an inline policy or a managed one."""
    iam = aws.client("iam")
    trust = {"Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                            "Action": "sts:AssumeRole"}]}
    iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))
    if policy:
        iam.put_role_policy(RoleName=name, PolicyName="p", PolicyDocument=json.dumps(policy))
    if managed:
        iam.attach_role_policy(RoleName=name, PolicyArn=f"arn:aws:iam::aws:policy/{managed}")
    iam.create_instance_profile(InstanceProfileName=name)
    iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)


def with_profile(name: str) -> str:
    return f"\n          IamInstanceProfile: {{Name: {name}}}"


def test_autostop_with_rays_default_head_profile_passes(aws, cluster):
    results = check_cluster(cluster(aws_yaml() + AUTOSTOP))
    assert only(results, "archive").status == WARN     # no archive: the logs go with the head
    result = only(results, "head credentials")
    assert result.status == OK
    assert "ray-autoscaler-v1" in result.detail and "ec2:TerminateInstances" in result.detail
    assert result.field == "metadata.orchestrate.autostop"


def test_autostop_with_a_head_role_that_may_terminate_passes(aws, cluster):
    head_profile(aws, "head-ec2-full", managed="AmazonEC2FullAccess")
    yaml = aws_yaml(key_lines=with_profile("head-ec2-full")) + AUTOSTOP
    result = only(check_cluster(cluster(yaml)), "head credentials")
    assert result.status == OK, result
    assert "head-ec2-full" in result.detail


def test_autostop_with_a_head_role_that_may_not_terminate_fails_naming_what_it_lacks(aws, cluster):
    head_profile(aws, "head-s3-only", policy={"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:*", "ec2:Describe*"], "Resource": "*"}]})
    yaml = aws_yaml(key_lines=with_profile("head-s3-only")) + AUTOSTOP
    result = only(check_cluster(cluster(yaml)), "head credentials")
    assert result.status == FAIL
    assert "ec2:StopInstances, ec2:TerminateInstances" in result.detail
    assert "ec2:DescribeInstances" not in result.detail.split("may not")[1]
    assert result.field == "available_node_types.head.node_config.IamInstanceProfile"
    assert result.line is not None and "head-s3-only" in result.hint


def test_a_head_profile_iam_does_not_know_warns_naming_what_it_needs(aws, cluster):
    yaml = aws_yaml(key_lines=with_profile("nowhere")) + AUTOSTOP
    result = only(check_cluster(cluster(yaml)), "head credentials")
    assert result.status == WARN and "NoSuchEntity" in result.detail
    assert "ec2:TerminateInstances" in result.detail


def test_without_autostop_the_head_credentials_are_not_checked(aws, cluster):
    assert by_name(check_cluster(cluster(aws_yaml())), "head credentials") == []


STORAGE = "storage: s3://team-results/runs\n"
S3_RW = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": ["s3:PutObject", "s3:GetObject", "s3:ListBucket"],
     "Resource": "*"}]}


def test_workers_without_an_instance_profile_cannot_write_s3_storage(aws, cluster):
    """Issue 52: Ray gives its instance profile to the head alone; a run of several workers on
    `storage: s3://` failed in Ray at its first checkpoint (ACCESS_DENIED) on the simulated
    cloud. `check` says so before the launch, at the worker type."""
    result = only(check_cluster(cluster(aws_yaml() + STORAGE)), "worker credentials")
    assert result.status == WARN
    assert "workers of type worker get no AWS credentials" in result.detail
    assert "s3://team-results/runs" in result.detail and "iam:PassRole" in result.hint
    assert result.field == "available_node_types.worker.node_config.IamInstanceProfile"


def test_a_worker_profile_rays_default_head_role_may_not_pass_fails(aws, cluster):
    head_profile(aws, "workers-s3", policy=S3_RW)
    yaml = aws_yaml(worker_lines=with_profile("workers-s3")) + STORAGE
    result = only(check_cluster(cluster(yaml)), "worker credentials")
    assert result.status == FAIL, result
    assert "ray-autoscaler-v1" in result.detail and "may not iam:PassRole" in result.detail


def test_a_worker_profile_with_s3_that_the_head_may_pass_passes(aws, cluster):
    head_profile(aws, "workers-s3-2", policy=S3_RW)
    head_profile(aws, "head-passes", managed="AmazonEC2FullAccess", policy={
        "Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "*"}]})
    yaml = aws_yaml(key_lines=with_profile("head-passes"),
                    worker_lines=with_profile("workers-s3-2")) + STORAGE
    result = only(check_cluster(cluster(yaml)), "worker credentials")
    assert result.status == OK, result
    # and a worker profile without S3 fails, naming what it lacks
    head_profile(aws, "workers-none", policy={"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"}]})
    yaml = aws_yaml(key_lines=with_profile("head-passes"),
                    worker_lines=with_profile("workers-none")) + STORAGE
    result = only(check_cluster(cluster(yaml)), "worker credentials")
    assert result.status == FAIL and "s3:PutObject" in result.detail, result


def test_without_s3_storage_the_workers_credentials_are_not_checked(aws, cluster):
    assert by_name(check_cluster(cluster(aws_yaml())), "worker credentials") == []
