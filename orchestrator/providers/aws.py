"""`aws`: what orchestrate knows about Ray's AWS provider (the shorthand's EC2 node config, what
forces a new cluster) and its preflight through boto3: credentials, region, zones, instance
types, AMIs, key pairs, quotas.

boto3 honours AWS_ENDPOINT_URL (and AWS_ENDPOINT_URL_<SERVICE>), which is how the tests point it
at a moto server on loopback.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import urllib.parse
from typing import Any

from .. import cluster_settings
from ..errors import Problem, require
from ..yamlload import Document
from . import cloud
from .base import (
    FAIL,
    OK,
    CheckResult,
    Checks,
    ClusterView,
    Config,
    FieldPath,
    NodePrice,
    compare_quota,
    listing,
    node_path,
    node_types,
    sdk_message,
    suggest,
    worst_case,
)

NAME = "aws"
EXTRA = "aws"
# Provider fields Ray's AWS provider reads.
KEYS = ("region", "availability_zone", "security_group", "aws_credentials", "cloudwatch")
REQUIRED = ("region",)
REPLACE_FIELDS = ("provider.region", "provider.availability_zone")
LEGACY_KEYS = cloud.LEGACY_KEYS
LAUNCH = cloud.LAUNCH
RAY_REPLACES = cloud.RAY_REPLACES
SCALING_FIELDS = cloud.SCALING_FIELDS
FIXED_HOSTS = cloud.FIXED_HOSTS
INSTANCE_TYPED = cloud.INSTANCE_TYPED
DEFAULT_START = cloud.DEFAULT_START
dashboard_host = cloud.dashboard_host
tls_names = cloud.tls_names
head_address = cloud.head_address
expected_nodes = cloud.expected_nodes
not_joined = cloud.not_joined
launcher_env = cloud.launcher_env
after_down = cloud.after_down
price_source = cloud.price_source


def price_layout(config: Config) -> Config:
    return cloud.price_layout(config, NAME)


def _priced(config: Config, name: str, node_type: Config) -> tuple[NodePrice, str | None]:
    """The catalog's spot prices are per zone ID (use1-az1), which maps to the zone names of
    `provider.availability_zone` differently in each account: spot takes the region's highest."""
    market = ((node_type.get("node_config") or {}).get("InstanceMarketOptions") or {})
    spot = str(market.get("MarketType", "")).lower() == "spot"
    region = str((config.get("provider") or {}).get("region") or "")
    return cloud.priced(NAME, name, node_type, ("InstanceType",), region, None, spot)


def node_price(config: Config, name: str, node_type: Config) -> NodePrice:
    return _priced(config, name, node_type)[0]


def price_warning(config: Config, name: str, node_type: Config) -> str | None:
    return _priced(config, name, node_type)[1]


def problems(doc: Document, data: Config) -> list[Problem]:
    return []


def group_problems(doc: Document, path: FieldPath, group: Config) -> list[Problem]:
    return cloud.group_problems(doc, path, group, NAME)


def node_config(group: Config) -> Config:
    config: Config = {"InstanceType": group["instance_type"]}
    if "image" in group:
        config["ImageId"] = group["image"]
    if "disk_gb" in group:
        config["BlockDeviceMappings"] = [
            {"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": group["disk_gb"], "VolumeType": "gp3"}}]
    if group.get("spot"):
        config["InstanceMarketOptions"] = {"MarketType": "spot"}
    return config


def check(spec: ClusterView) -> list[CheckResult]:
    return _checks(spec) + cloud.archive_note(spec) + \
        cloud.node_types_note(spec, NAME)


CREDENTIALS_HINT = "run `aws configure`, or set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"

# Service Quotas codes of the vCPU limits, by instance family letters: (on-demand, spot).
_STANDARD = ("L-1216C47A", "L-34B43A08")
QUOTA_CODES = {
    **{letter: _STANDARD for letter in ("a", "c", "d", "h", "i", "m", "r", "t", "z")},
    "g": ("L-DB2E81BA", "L-3819A6DF"), "vt": ("L-DB2E81BA", "L-3819A6DF"),
    "p": ("L-417A185B", "L-7212CCBC"),
    "x": ("L-7295265B", "L-E3A00192"),
    "f": ("L-74FC7D96", "L-88CF9481"),
}


def _session(region: str | None = None) -> Any:
    boto3 = require("boto3", "boto3", EXTRA)
    return boto3.session.Session(region_name=region)


def _client(session: Any, service: str, region: str | None = None) -> Any:
    from botocore.config import Config
    config = Config(connect_timeout=5, read_timeout=20, retries={"max_attempts": 2})
    return session.client(service, region_name=region or session.region_name or "us-east-1",
                          config=config)


def _error_code(exc: Exception) -> str:
    return ((getattr(exc, "response", None) or {}).get("Error") or {}).get("Code") or type(exc).__name__


def _identity(session: Any, region: str | None) -> tuple[str, str, str | None]:
    """(status, detail, hint) of the credentials."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
    try:
        ident = _client(session, "sts", region).get_caller_identity()
    except NoCredentialsError:
        return FAIL, "no AWS credentials found", CREDENTIALS_HINT
    except ClientError as exc:
        return FAIL, f"AWS rejected the credentials ({_error_code(exc)})", CREDENTIALS_HINT
    except BotoCoreError as exc:
        return FAIL, f"could not reach AWS: {sdk_message(exc)}", "check the network or AWS_ENDPOINT_URL"
    return OK, f"account {ident['Account']} ({ident['Arn']})", None


def credentials() -> CheckResult:
    status, detail, hint = _identity(_session(), None)
    return CheckResult("aws credentials", status, detail, hint)


def _checks(spec: ClusterView) -> list[CheckResult]:
    from botocore.exceptions import BotoCoreError, ClientError
    checks = Checks(spec)
    region = (spec.document.get("provider") or {}).get("region")
    if not region:
        checks.fail("region", "provider.region is not set", "set provider.region, e.g. us-west-2",
                    ("provider",))
        return checks.results
    session = _session(region)
    status, detail, hint = _identity(session, region)
    checks.add(status, "credentials", detail, hint)
    if checks.failed:
        return checks.results
    ec2 = _client(session, "ec2", region)
    try:
        zones = _check_region(checks, session, ec2, region)
        if zones is None:
            return checks.results
        types = _check_instance_types(checks, ec2, region, zones)
        _check_images(checks, ec2, region, types)
        _check_key_pairs(checks, ec2, region)
        _check_quotas(checks, session, region, types)
        if cloud.autostop_wanted(spec):
            _check_head_credentials(checks, session, region)
        _check_worker_credentials(checks, session, region)
    except (BotoCoreError, ClientError) as exc:
        checks.fail("aws", f"AWS call failed: {sdk_message(exc)}",
                    "check the credentials' permissions (ec2:Describe*, servicequotas:GetServiceQuota)")
    return checks.results


def _zones_wanted(document: Config) -> list[str]:
    text = (document.get("provider") or {}).get("availability_zone") or ""
    return [zone.strip() for zone in str(text).split(",") if zone.strip()]


def _check_region(checks: Checks, session: Any, ec2: Any, region: str) -> list[str] | None:
    """The zones the cluster may use, or None when the region itself is unusable."""
    from botocore.exceptions import ClientError
    known: set[str] = set()
    for partition in session.get_available_partitions():
        known.update(session.get_available_regions("ec2", partition))
    path = ("provider", "region")
    if known and region not in known:
        checks.fail("region", f"there is no AWS region {region!r}",
                    suggest(region, known, "AWS regions") + "; a region newer than this boto3 "
                    "needs a newer boto3", path)
        return None
    try:
        reply = ec2.describe_availability_zones()
    except ClientError as exc:
        checks.fail("region", f"region {region} is not usable by this account ({_error_code(exc)})",
                    "enable the region (opt-in regions) or pick another one", path)
        return None
    zones = sorted(z["ZoneName"] for z in reply["AvailabilityZones"]
                   if z.get("State", "available") == "available")
    checks.ok("region", f"{region}: zones {listing(zones)}", path)
    wanted = _zones_wanted(checks.spec.document)
    path = ("provider", "availability_zone")
    unknown = [zone for zone in wanted if zone not in zones]
    if unknown:
        checks.fail("availability zone", f"{listing(unknown)} not in region {region}",
                    f"zones of {region}: {listing(zones)}", path)
    elif wanted:
        checks.ok("availability zone", listing(wanted), path)
    return [zone for zone in wanted if zone in zones] or zones


def _offered_in(ec2: Any, location_type: str, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType=location_type, Filters=filters)
    return [offer for page in pages for offer in page["InstanceTypeOfferings"]]


def _check_instance_types(checks: Checks, ec2: Any, region: str, zones: list[str]) -> dict[str, Any]:
    """Check each InstanceType; returns {instance type: its DescribeInstanceTypes entry}."""
    from botocore.exceptions import ClientError
    wanted: dict[str, list[str]] = {}
    for name, node_type in node_types(checks.spec.document):
        itype = (node_type.get("node_config") or {}).get("InstanceType")
        if itype:
            wanted.setdefault(itype, []).append(name)
    configured = _zones_wanted(checks.spec.document)
    described: dict[str, Any] = {}
    for itype, names in sorted(wanted.items()):
        path = node_path(names[0], "InstanceType")
        try:
            desc = ec2.describe_instance_types(InstanceTypes=[itype])["InstanceTypes"][0]
        except ClientError as exc:
            if _error_code(exc) not in ("InvalidInstanceType", "InvalidParameterValue"):
                raise
            offered = {o["InstanceType"] for o in _offered_in(ec2, "region", [])}
            checks.fail("instance type", f"{itype!r} is not an EC2 instance type",
                        suggest(itype, offered, f"offered in {region}"), path)
            continue
        described[itype] = desc
        filters = [{"Name": "instance-type", "Values": [itype]}]
        offered = {o["Location"] for o in _offered_in(ec2, "availability-zone", filters)}
        usable = offered & set(zones)
        vcpus = desc["VCpuInfo"]["DefaultVCpus"]
        if not offered:
            checks.fail("instance type", f"{itype} is not offered in region {region}",
                        "pick another instance type or region", path)
        elif not usable:
            checks.fail("instance type", f"{itype} is not offered in zone {listing(zones)}",
                        f"zones of {region} that offer it: {listing(offered)} "
                        "(set provider.availability_zone to them)", path)
        elif configured and usable != set(zones):
            checks.warn("instance type",
                        f"{itype} is offered in {listing(usable)}, not in {listing(set(zones) - usable)}",
                        "drop those zones from provider.availability_zone", path)
        else:
            checks.ok("instance type", f"{itype} ({vcpus} vCPUs) offered in {listing(usable)}", path)
    return described


def _check_images(checks: Checks, ec2: Any, region: str, described: dict[str, Any]) -> None:
    from botocore.exceptions import ClientError
    images: dict[str, Any] = {}  # AMI id -> its DescribeImages entry, None when missing
    for name, node_type in node_types(checks.spec.document):
        config = node_type.get("node_config") or {}
        image_id = config.get("ImageId")
        if not image_id:
            continue
        path = node_path(name, "ImageId")
        if image_id not in images:
            try:
                found = ec2.describe_images(ImageIds=[image_id])["Images"]
            except ClientError as exc:
                if not _error_code(exc).startswith("InvalidAMIID"):
                    raise
                found = []
            images[image_id] = found[0] if found else None
        image = images[image_id]
        if image is None:
            checks.fail("image", f"AMI {image_id} does not exist in {region} or is not readable",
                        f"AMI ids differ per region: use the {region} id of the image, "
                        "or share/copy the AMI to this account and region", path)
            continue
        arch = image.get("Architecture")
        supported = (described.get(config.get("InstanceType", "")) or {}).get(
            "ProcessorInfo", {}).get("SupportedArchitectures", [])
        if image.get("State", "available") != "available":
            checks.fail("image", f"AMI {image_id} is {image['State']}", "use an available AMI", path)
        elif arch and supported and arch not in supported:
            checks.fail("image", f"AMI {image_id} is {arch}, {config['InstanceType']} runs "
                        f"{listing(supported)}", f"use an AMI built for {supported[0]}", path)
        else:
            checks.ok("image", f"{image_id} ({image.get('Name', '?')}, {arch})", path)


def _check_key_pairs(checks: Checks, ec2: Any, region: str) -> None:
    from botocore.exceptions import ClientError
    document = checks.spec.document
    seen: set[str] = set()
    for name, node_type in node_types(document):
        key = (node_type.get("node_config") or {}).get("KeyName")
        if not key or key in seen:
            continue
        seen.add(key)
        path = node_path(name, "KeyName")
        try:
            ec2.describe_key_pairs(KeyNames=[key])
            checks.ok("key pair", f"{key} exists in {region}", path)
        except ClientError as exc:
            if _error_code(exc) != "InvalidKeyPair.NotFound":
                raise
            existing = [k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]]
            checks.fail("key pair", f"key pair {key!r} does not exist in {region}",
                        f"existing key pairs: {listing(existing)}; or drop KeyName and Ray "
                        "creates one", path)
    private = (document.get("auth") or {}).get("ssh_private_key", "")
    if seen and not private:
        checks.fail("ssh key", "KeyName is set but auth.ssh_private_key is not",
                    "set auth.ssh_private_key to that key pair's .pem file", ("auth",))
    elif seen and not os.path.exists(os.path.expanduser(private)):
        checks.fail("ssh key", f"{private} does not exist", "point it at the key pair's .pem file",
                    ("auth", "ssh_private_key"))


def _quota_code(node_type: Config) -> str | tuple[str, str]:
    config = node_type.get("node_config") or {}
    match = re.match(r"[a-z]*", config.get("InstanceType", ""))
    assert match is not None  # [a-z]* matches at the start of every string
    letters = match.group(0)
    letters = "i" if letters in ("im", "is") else letters
    spot = (config.get("InstanceMarketOptions") or {}).get("MarketType") == "spot"
    codes = QUOTA_CODES.get(letters)
    return codes[1 if spot else 0] if codes else ("unknown", letters)


def _check_quotas(checks: Checks, session: Any, region: str, described: dict[str, Any]) -> None:
    from botocore.exceptions import BotoCoreError, ClientError
    document = checks.spec.document

    def group(name: str, node_type: Config) -> str | tuple[str, str] | None:
        itype = (node_type.get("node_config") or {}).get("InstanceType")
        return _quota_code(node_type) if itype in described else None

    def vcpus(name: str, node_type: Config) -> Any:  # DescribeInstanceTypes' DefaultVCpus
        return described[node_type["node_config"]["InstanceType"]]["VCpuInfo"]["DefaultVCpus"]

    quotas = _client(session, "service-quotas", region)
    for code, need in sorted(worst_case(document, group, vcpus).items(), key=str):
        if isinstance(code, tuple):
            checks.warn("vCPU quota", f"no known vCPU quota for the {code[1]} family; "
                        f"the worst case needs {need} vCPUs", "check it in Service Quotas",
                        ("max_workers",))
            continue
        try:
            quota = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]
        except (BotoCoreError, ClientError) as exc:
            checks.warn("vCPU quota", f"could not read quota {code} ({_error_code(exc)}); the "
                        f"worst case needs {need} vCPUs",
                        "allow servicequotas:GetServiceQuota, or check the quota by hand",
                        ("max_workers",))
            continue
        label = quota.get("QuotaName", code)
        compare_quota(checks, "vCPU quota", f"vCPUs of {label!r}", need, quota["Value"], None,
                      region, f"request more of {code} in Service Quotas")


# Ray's default head profile and what it gets (ray/autoscaler/_private/aws/config.py): its role
# has AmazonEC2FullAccess and AmazonS3FullAccess.
DEFAULT_HEAD_PROFILE = "ray-autoscaler-v1"


def head_actions(document: Config) -> tuple[str, ...]:
    """What autostop's takedown asks of EC2 with the head's role (Ray's AWS node provider): list
    the nodes, stop the on-demand ones when `cache_stopped_nodes` (Ray's default), terminate the
    rest."""
    stops = (document.get("provider") or {}).get("cache_stopped_nodes", True)
    return ("ec2:DescribeInstances", "ec2:TerminateInstances") + (
        ("ec2:StopInstances",) if stops else ())


def _check_head_credentials(checks: Checks, session: Any, region: str) -> None:
    """Autostop runs Ray's node provider on the head with the head's instance profile: may its
    role stop and terminate the cluster's instances? Asked of IAM when it answers."""
    from botocore.exceptions import BotoCoreError, ClientError
    head, config = cloud.head_node_config(checks.spec)
    named = config.get("IamInstanceProfile") or {}
    name = str(named.get("Name") or str(named.get("Arn") or "").rsplit("/", 1)[-1])
    path = node_path(head, "IamInstanceProfile") if name else cloud.AUTOSTOP_PATH
    profile = name or DEFAULT_HEAD_PROFILE
    needs = head_actions(checks.spec.document)
    wanted = f"autostop takes the cluster down from its head with the head's instance profile {profile}"
    hint = (f"give the role of instance profile {profile} {', '.join(needs)} (AmazonEC2FullAccess "
            "has them), or drop autostop")
    iam = _client(session, "iam", region)
    try:
        roles = iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]["Roles"]
        missing = sorted({action for role in roles
                          for action in _not_allowed(iam, role["RoleName"], needs)}
                         if roles else needs)
    except ClientError as exc:
        if _error_code(exc) == "NoSuchEntity" and not name:
            checks.ok(cloud.HEAD_CREDENTIALS, f"{wanted}: Ray creates it with AmazonEC2FullAccess "
                      f"({', '.join(needs)})", path)
            return
        checks.warn(cloud.HEAD_CREDENTIALS, f"{wanted}; could not read it from IAM "
                    f"({_error_code(exc)}): it needs {', '.join(needs)}", hint, path)
        return
    except BotoCoreError as exc:
        checks.warn(cloud.HEAD_CREDENTIALS, f"{wanted}; could not ask IAM ({sdk_message(exc)}): "
                    f"it needs {', '.join(needs)}", hint, path)
        return
    if not roles and not name:
        checks.ok(cloud.HEAD_CREDENTIALS, f"{wanted}: it has no role yet, and Ray adds one with "
                  "AmazonEC2FullAccess", path)
    elif missing:
        checks.fail(cloud.HEAD_CREDENTIALS, f"{wanted}, whose role may not {', '.join(missing)}: "
                    "the cluster would stay up", hint, path)
    else:
        checks.ok(cloud.HEAD_CREDENTIALS, f"{wanted}, whose role allows {', '.join(needs)}", path)


WORKER_CREDENTIALS = "worker credentials"
WORKER_ACTIONS = ("s3:PutObject", "s3:GetObject", "s3:ListBucket")


def _profile_name(node_config: Config) -> str:
    named = node_config.get("IamInstanceProfile") or {}
    return str(named.get("Name") or str(named.get("Arn") or "").rsplit("/", 1)[-1])


def _check_worker_credentials(checks: Checks, session: Any, region: str) -> None:
    """The cluster's `storage: s3://...` is written by every training worker (Ray Train persists
    checkpoints from each), and an AWS instance has credentials only from its instance profile.
    Ray's bootstrap gives its default profile to the head alone, so a worker type that names none
    cannot write there; one that names a profile is launched by the autoscaler with the head's
    credentials, which must be allowed to pass its role (iam:PassRole), as AWS checks."""
    from botocore.exceptions import BotoCoreError, ClientError

    storage = cluster_settings.storage(checks.spec.document) or ""
    if not storage.startswith("s3://"):
        return
    head, head_config = cloud.head_node_config(checks.spec)
    types = checks.spec.document.get("available_node_types") or {}
    workers = {name: dict((node or {}).get("node_config") or {}) for name, node in types.items()
               if name != head and isinstance(node, dict)}
    where = ("metadata", cluster_settings.KEY, "storage")
    bare = sorted(name for name, config in workers.items() if not _profile_name(config))
    for name in bare:
        checks.warn(WORKER_CREDENTIALS, f"workers of type {name} get no AWS credentials (Ray "
                    f"gives its instance profile to the head alone), so they cannot write the "
                    f"cluster's storage {storage}: a run on them fails at its first checkpoint",
                    "name an IamInstanceProfile with s3:PutObject there in its node_config, "
                    "and allow the head's role iam:PassRole on its role",
                    node_path(name, "IamInstanceProfile") if name in types else where)
    named = {name: _profile_name(config) for name, config in workers.items() if name not in bare}
    if not named:
        return
    iam = _client(session, "iam", region)
    head_profile = _profile_name(head_config) or DEFAULT_HEAD_PROFILE
    try:
        try:
            head_roles = [role["RoleName"] for role in iam.get_instance_profile(
                InstanceProfileName=head_profile)["InstanceProfile"]["Roles"]]
        except ClientError as exc:
            if _error_code(exc) != "NoSuchEntity" or _profile_name(head_config):
                raise
            head_roles = []   # Ray makes it: AmazonEC2FullAccess and AmazonS3FullAccess
        passes = bool(head_roles) and not any(
            _not_allowed(iam, role, ("iam:PassRole",)) for role in head_roles)
        for name, profile in sorted(named.items()):
            roles = [role["RoleName"] for role in iam.get_instance_profile(
                InstanceProfileName=profile)["InstanceProfile"]["Roles"]]
            missing = sorted({a for role in roles for a in _not_allowed(iam, role, WORKER_ACTIONS)}
                             if roles else WORKER_ACTIONS)
            path = node_path(name, "IamInstanceProfile")
            if missing:
                checks.fail(WORKER_CREDENTIALS, f"workers of type {name} (instance profile "
                            f"{profile}) may not {', '.join(missing)}: they cannot write the "
                            f"cluster's storage {storage}", f"allow the role of {profile} "
                            f"{', '.join(WORKER_ACTIONS)} on it", path)
            elif not passes:
                checks.fail(WORKER_CREDENTIALS, f"the head's role (instance profile "
                            f"{head_profile}) may not iam:PassRole, so the autoscaler cannot "
                            f"launch workers of type {name} with instance profile {profile}",
                            f"allow the head's role iam:PassRole on the role of {profile} "
                            "(AmazonEC2FullAccess does not)", path)
            else:
                checks.ok(WORKER_CREDENTIALS, f"workers of type {name} write {storage} with "
                          f"instance profile {profile}, which the head may pass", path)
    except ClientError as exc:
        checks.warn(WORKER_CREDENTIALS, f"could not read the instance profiles from IAM "
                    f"({_error_code(exc)}): workers need s3:PutObject on {storage}, the head "
                    "iam:PassRole on their role", None, where)
    except BotoCoreError as exc:
        checks.warn(WORKER_CREDENTIALS, f"could not ask IAM ({sdk_message(exc)}): workers need "
                    f"s3:PutObject on {storage}, the head iam:PassRole on their role", None, where)


def _not_allowed(iam: Any, role: str, actions: tuple[str, ...]) -> list[str]:
    """The actions no statement of the role's policies allows, or one denies (any resource, any
    condition: what a statement restricts is not weighed here)."""
    statements: list[dict[str, Any]] = []
    for attached in iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]:
        policy = iam.get_policy(PolicyArn=attached["PolicyArn"])["Policy"]
        version = iam.get_policy_version(PolicyArn=attached["PolicyArn"],
                                         VersionId=policy["DefaultVersionId"])
        statements += _statements(version["PolicyVersion"]["Document"])
    for inline in iam.list_role_policies(RoleName=role)["PolicyNames"]:
        statements += _statements(iam.get_role_policy(RoleName=role, PolicyName=inline)
                                  ["PolicyDocument"])

    def says(effect: str, action: str) -> bool:
        return any(s.get("Effect") == effect and any(
            fnmatch.fnmatchcase(action.lower(), str(pattern).lower())
            for pattern in _listed(s.get("Action"))) for s in statements)

    return [a for a in actions if not says("Allow", a) or says("Deny", a)]


def _statements(document: Any) -> list[dict[str, Any]]:
    if isinstance(document, str):  # URL-encoded JSON when the SDK leaves it as text
        document = json.loads(urllib.parse.unquote(document))
    found = document.get("Statement") or []
    return [s for s in ([found] if isinstance(found, dict) else found) if isinstance(s, dict)]


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value] if value else []


def location(config: Config) -> str:
    return f"AWS {(config.get('provider') or {}).get('region', '?')}"


def bootstrap_key(config: Config) -> str | None:
    """`~/.ssh/<KeyName>.pem` of the cluster's running head (Ray's tags) if that file exists:
    where Ray's bootstrap (`key_pair` in ray/autoscaler/_private/aws/config.py) writes the key
    of the pair it makes; None when it does not, or the cloud could not be asked (the caller
    then says that the head refused this machine's key)."""
    import botocore.exceptions

    provider = config.get("provider") or {}
    try:
        ec2 = _client(_session(provider.get("region")), "ec2", provider.get("region"))
        found = ec2.describe_instances(Filters=[
            {"Name": "tag:ray-cluster-name", "Values": [str(config.get("cluster_name"))]},
            {"Name": "tag:ray-node-type", "Values": ["head"]},
            {"Name": "instance-state-name", "Values": ["running"]}])
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError):
        return None
    names = {i.get("KeyName") for r in found.get("Reservations", []) for i in r["Instances"]}
    names.discard(None)
    if len(names) != 1:
        return None
    name = str(names.pop())
    if "/" in name or name.startswith("."):   # the cloud's answer names a file: a plain name
        return None
    path = os.path.expanduser(f"~/.ssh/{name}.pem")
    return path if os.path.isfile(path) else None
