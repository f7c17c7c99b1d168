"""A simulated AWS on this machine: moto's server for EC2, IAM, STS and S3, and each running
instance a simulated host (tests/cluster/hosts.py) at its private address, so that `orchestrate
up` of an AWS cluster file goes through Ray's own AWS provider end to end.

    python -m tests.cloud -- bash my-scenario.sh     (as root) the cloud around one command
    with Cloud.start(folder) as cloud: ...            in a test: cloud.env for the CLI

What is real: Ray's AWS node provider and bootstrap (IAM role and instance profile, security
group, subnets, key pair), boto3 and its requests (to moto, at the wire), SSH to each instance
with its key pair, Ray on every node, the autoscaler's decisions and the instances it launches
and terminates with the head's own credentials, S3 reads and writes (moto's S3), IAM policies
where moto enforces them (`iam=True`).

Ray runs with its own settings, as on users' instances (not the on-prem test hosts' shorter
autoscaler interval: `ray_defaults`).

What is not: boot time (a host is up within a second of its instance running), AMI contents
(every instance runs the image of the on-prem test hosts: this machine's venv with Ray, a login
user `ubuntu` with root's rights, as passwordless sudo gives), IMDS (an instance's credentials
and region come in its login shell's environment, as an instance profile would give them, with
the endpoint of moto's server), VPC routing (one bridge; security groups are recorded, not
enforced), quotas, capacity, prices, spot interruptions (none happen unless a test terminates an
instance), instance types (an m5.large host has this machine's cores).

Addresses: one 10.x.y.0/24 on a bridge the cloud makes (moto's server listens on its .1, where
both this machine and the hosts reach it: never on another address), one VPC with that range and
one subnet per availability zone in it; moto's own default VPC is deleted, so Ray's bootstrap
picks these subnets as it would a user's. A stopped or terminated instance loses its host at once
(every process killed, as a machine losing power); a stopped one started again boots from its
own folder (same host key and home, as from its disk); a terminated one's address goes back to
its subnet at once, as on AWS, and the next instance launched there is given it: a new machine
with a new host key at an address this machine may have pinned.
"""
from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster.hosts import Host, Network

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b")
ACCESS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}   # before IAM
ADMIN = "sim-admin"          # the user's IAM identity: may do anything (an account's admin)
BUCKET = "orchestrate-sim"   # made at start: the scenario's storage, archive and state
POLL_S = 0.25                # how often the materializer looks at moto's instances


@dataclass
class Instance:
    id: str
    ip: str
    folder: Path
    host: Host | None = None


@dataclass
class Cloud:
    folder: Path
    network: Network
    url: str
    region: str = REGION
    vpc: str = ""
    subnets: dict[str, str] = field(default_factory=dict)   # zone -> subnet id
    instances: dict[str, Instance] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)          # what the materializer did, in order
    _server: object = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    errors: list[str] = field(default_factory=list)
    access: dict[str, str] = field(default_factory=lambda: dict(ACCESS))   # the user's keys
    iam: bool = False            # moto checks every request's signature and IAM policies
    _managed_policies: str | None = None   # the variable's value before the cloud set it

    # -- what a user's shell and an instance's shell get ------------------------------------------
    @property
    def env(self) -> dict[str, str]:
        """The AWS settings of a user's shell pointed at the simulated cloud (the SDK's own
        variables: boto3 and Ray read them; nothing of orchestrate's)."""
        return {"AWS_ENDPOINT_URL": self.url, "AWS_DEFAULT_REGION": self.region,
                "AWS_EC2_METADATA_DISABLED": "true", **self.access}

    def instance_env(self, profile_arn: str | None, instance_id: str) -> dict[str, str]:
        """An instance's: the endpoint and region (IMDS's part), and credentials only when it
        has an instance profile, as AWS gives them: a session of the profile's role (STS
        AssumeRole, 12 hours), so that with `iam` on, what the instance may do is what the
        role's policies allow."""
        env = {"AWS_ENDPOINT_URL": self.url, "AWS_DEFAULT_REGION": self.region,
               "AWS_EC2_METADATA_DISABLED": "true"}
        if not profile_arn:
            return env
        profile = profile_arn.rsplit("/", 1)[-1]
        roles = self.client("iam").get_instance_profile(
            InstanceProfileName=profile)["InstanceProfile"]["Roles"]
        if not roles:
            self.errors.append(f"{instance_id}: instance profile {profile} has no role")
            return env
        # EC2 assumes the role for the instance (the role trusts ec2.amazonaws.com, not the
        # user): here moto's STS is asked in this process, as EC2 would ask AWS's.
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.sts.models import sts_backends

        given = sts_backends[DEFAULT_ACCOUNT_ID]["aws"].assume_role(
            region_name=self.region, role_session_name=instance_id, role_arn=roles[0]["Arn"],
            policy="", duration=43200, external_id="")
        return {**env, "AWS_ACCESS_KEY_ID": given.access_key_id,
                "AWS_SECRET_ACCESS_KEY": given.secret_access_key,
                "AWS_SESSION_TOKEN": given.session_token}

    def client(self, service: str):
        import boto3

        return boto3.client(service, endpoint_url=self.url, region_name=self.region,
                            aws_access_key_id=self.access["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=self.access["AWS_SECRET_ACCESS_KEY"])

    # -- life -------------------------------------------------------------------------------------
    @classmethod
    def start(cls, folder: Path, zones: tuple[str, ...] = ZONES, iam: bool = True) -> Cloud:
        """`iam`: moto enforces IAM from the end of the start on (its INITIAL_NO_AUTH_ACTION_COUNT,
        set through its /moto-api/reset-auth): the user is an IAM user allowed everything, each
        instance a session of its profile's role."""
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)   # a line per request otherwise
        # AWS's managed policies (Ray's bootstrap attaches AmazonEC2FullAccess and
        # AmazonS3FullAccess to the head's role), read when moto's IAM backend is made: moto's
        # data lives in this process, so it is reset here (and at close) to be made afresh.
        before = os.environ.get("MOTO_IAM_LOAD_MANAGED_POLICIES")
        os.environ["MOTO_IAM_LOAD_MANAGED_POLICIES"] = "true"
        folder.mkdir(parents=True, exist_ok=True)
        network = Network.create(folder / "hosts", count=0)
        gateway = f"{network.subnet}.1"
        server = ThreadedMotoServer(ip_address=gateway, port=0, verbose=False)
        try:
            server.start()
            _, port = server.get_host_and_port()
            cloud = cls(folder=folder, network=network, url=f"http://{gateway}:{port}",
                        _server=server, _managed_policies=before)
            cloud._reset()
            cloud._lay_out(zones)
            if iam:
                cloud._enforce_iam()
        except BaseException:
            with contextlib.suppress(Exception):
                server.stop()
            network.close()
            raise
        cloud._thread = threading.Thread(target=cloud._watch, name="materializer", daemon=True)
        cloud._thread.start()
        return cloud

    def _lay_out(self, zones: tuple[str, ...]) -> None:
        """moto's default VPC out; a VPC of the bridge's range, a subnet per zone; the bucket."""
        ec2 = self.client("ec2")
        for vpc in ec2.describe_vpcs()["Vpcs"]:
            if vpc.get("IsDefault"):
                for subnet in ec2.describe_subnets(
                        Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])["Subnets"]:
                    ec2.delete_subnet(SubnetId=subnet["SubnetId"])
                for gateway in ec2.describe_internet_gateways(
                        Filters=[{"Name": "attachment.vpc-id",
                                  "Values": [vpc["VpcId"]]}])["InternetGateways"]:
                    ec2.detach_internet_gateway(InternetGatewayId=gateway["InternetGatewayId"],
                                                VpcId=vpc["VpcId"])
                    ec2.delete_internet_gateway(InternetGatewayId=gateway["InternetGatewayId"])
                ec2.delete_vpc(VpcId=vpc["VpcId"])
        block = ipaddress.ip_network(f"{self.network.subnet}.0/24")
        self.vpc = ec2.create_vpc(CidrBlock=str(block))["Vpc"]["VpcId"]
        parts = list(block.subnets(new_prefix=25 if len(zones) <= 2 else 26))
        for zone, part in zip(zones, parts, strict=False):
            self.subnets[zone] = ec2.create_subnet(VpcId=self.vpc, CidrBlock=str(part),
                                                   AvailabilityZone=zone)["Subnet"]["SubnetId"]
        self.client("s3").create_bucket(Bucket=BUCKET)

    def _moto_api(self, path: str, body: bytes | None = None) -> None:
        import urllib.request

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        opener.open(urllib.request.Request(f"{self.url}/moto-api/{path}", data=body,
                                           headers={"Content-Type": "text/plain"},
                                           method="POST"), timeout=30).read()

    def _reset(self) -> None:
        self._moto_api("reset")

    def _enforce_iam(self) -> None:
        iam = self.client("iam")
        iam.create_user(UserName=ADMIN)
        iam.put_user_policy(UserName=ADMIN, PolicyName="all", PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName=ADMIN)["AccessKey"]
        self.access = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                       "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
        self._moto_api("reset-auth", b"0")
        self.iam = True

    def close(self) -> None:
        """Every host powered off and removed, the bridge gone, moto's data reset and its server
        stopped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        try:
            with contextlib.suppress(OSError):   # on the bridge's address: before it goes
                self._reset()
                if self.iam:   # moto's setting is this process's: as it was for the next test
                    self._moto_api("reset-auth", b"inf")
            self.network.close()
        finally:
            self._server.stop()   # type: ignore[attr-defined]
            if self._managed_policies is None:
                os.environ.pop("MOTO_IAM_LOAD_MANAGED_POLICIES", None)
            else:
                os.environ["MOTO_IAM_LOAD_MANAGED_POLICIES"] = self._managed_policies

    def __enter__(self) -> Cloud:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the materializer ---------------------------------------------------------------------------
    def _watch(self) -> None:
        ec2 = self.client("ec2")
        while not self._stop.is_set():
            try:
                self.sync(ec2)
            except Exception as exc:  # noqa: BLE001 - shown by `check()`; the watch goes on
                self.errors.append(f"{time.strftime('%H:%M:%S')} {type(exc).__name__}: {exc}")
            self._stop.wait(POLL_S)

    def sync(self, ec2=None) -> None:
        """Make the hosts match moto's instances: a host for each running one, none for the
        others."""
        ec2 = ec2 or self.client("ec2")
        found = [instance for page in ec2.get_paginator("describe_instances").paginate()
                 for reservation in page["Reservations"] for instance in reservation["Instances"]]
        with self._lock:
            for described in found:
                state = described["State"]["Name"]
                known = self.instances.get(described["InstanceId"])
                running = state in ("pending", "running")
                if running and (known is None or known.host is None):
                    self._boot(ec2, described, known)
                elif not running and known is not None and known.host is not None:
                    self.network.remove_host(known.host)
                    known.host = None
                    self.events.append(f"{known.id} {state}: host at {known.ip} powered off")
                    if state == "terminated":
                        self._release(described)

    def _release(self, described: dict) -> None:
        """AWS frees a terminated instance's private address at once, and hands it to the next
        instance launched in its subnet; moto keeps it while it still lists the instance. Freed
        here in moto's subnet (in this process: moto's API has no call for it), so that a new
        instance can be given it: another machine, with another host key, at a known address."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.ec2.models import ec2_backends

        subnet = ec2_backends[DEFAULT_ACCOUNT_ID][self.region].get_subnet(described["SubnetId"])
        subnet.del_subnet_ip(described["PrivateIpAddress"])

    def _boot(self, ec2, described: dict, known: Instance | None) -> None:
        ip = described.get("PrivateIpAddress")
        if not ip or ipaddress.ip_address(ip) not in ipaddress.ip_network(
                f"{self.network.subnet}.0/24"):
            self.errors.append(f"{described['InstanceId']} has no address in the simulated "
                               f"VPC ({ip}): launched outside its subnets")
            return
        keys = ""
        if described.get("KeyName"):
            pairs = ec2.describe_key_pairs(KeyNames=[described["KeyName"]],
                                           IncludePublicKey=True)["KeyPairs"]
            keys = pairs[0].get("PublicKey", "") if pairs else ""
        instance = known or Instance(described["InstanceId"], ip,
                                     self.folder / "instances" / described["InstanceId"])
        profile = (described.get("IamInstanceProfile") or {}).get("Arn")
        instance.host = self.network.add_host(
            ip=ip, folder=instance.folder, authorized_keys=keys, users=("ubuntu",),
            environment=self.instance_env(profile, instance.id), ray_defaults=True)
        self.instances[instance.id] = instance
        self.events.append(f"{instance.id} running: host at {ip} booted"
                           + (" (again, from its disk)" if known else "")
                           + (f", with a session of {profile.rsplit('/', 1)[-1]}'s role"
                              if profile else ""))

    # -- for tests ----------------------------------------------------------------------------------
    def next_address(self, ip: str) -> None:
        """The next instance launched in `ip`'s subnet is given `ip` (a freed address: AWS makes
        no such promise, but may; a test uses it to meet a reused address for certain). moto
        hands out its freed addresses first, from a set: it is left holding this one alone."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.ec2.models import ec2_backends

        backend = ec2_backends[DEFAULT_ACCOUNT_ID][self.region]
        for subnet_id in self.subnets.values():
            subnet = backend.get_subnet(subnet_id)
            if ipaddress.ip_address(ip) in subnet.cidr:
                assert ip in subnet._unused_ips, f"{ip} is not free"
                subnet._unused_ips = {ip}
                return
        raise ValueError(f"{ip} is in none of the cloud's subnets")

    def running(self) -> dict[str, str]:
        """Instance id -> address of each instance with a host now."""
        with self._lock:
            return {i.id: i.ip for i in self.instances.values() if i.host is not None}

    def host(self, ip: str) -> Host | None:
        with self._lock:
            return next((i.host for i in self.instances.values()
                         if i.host is not None and i.ip == ip), None)

    def check(self) -> None:
        """Raise if the materializer met anything it could not simulate."""
        if self.errors:
            raise RuntimeError("the simulated cloud: " + "; ".join(self.errors[-5:]))

    def describe(self) -> str:
        """What happened, for a failing test's message."""
        return "\n".join(["simulated cloud events:", *self.events[-40:],
                          *(["errors:", *self.errors[-10:]] if self.errors else [])])


def exports(cloud: Cloud) -> dict[str, str]:
    """What a command run inside the cloud needs: the SDK's settings, and where things are."""
    return {**cloud.env, "ORCHESTRATE_SIM_BUCKET": BUCKET, "ORCHESTRATE_SIM_VPC": cloud.vpc,
            "ORCHESTRATE_SIM_SUBNETS": json.dumps(cloud.subnets),
            "ORCHESTRATE_SIM_FOLDER": str(cloud.folder)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.cloud",
        description="Bring up the simulated AWS, run COMMAND with its variables exported, and "
                    "tear everything down after (exit code: COMMAND's).")
    parser.add_argument("--folder", help="where the cloud keeps its files (default: a new "
                        "temporary folder, removed after)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name a command after --, e.g. python -m tests.cloud -- bash scenario.sh")
    from tests import prerequisites

    gaps = prerequisites.missing()
    if gaps:
        print(f"error: {prerequisites.message(gaps)}", file=sys.stderr)
        return 1
    folder = Path(args.folder) if args.folder else Path(tempfile.mkdtemp(prefix="orc-cloud-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # the finally below still runs
    cloud = Cloud.start(folder)
    try:
        variables = exports(cloud)
        for key, value in variables.items():
            print(f"export {key}={shlex_quote(value)}", file=sys.stderr)
        print(f"# running: {' '.join(command)}", file=sys.stderr)
        done = subprocess.run(command, env={**os.environ, **variables})
        return done.returncode
    except KeyboardInterrupt:
        return 130
    finally:
        cloud.close()
        if not args.folder:
            shutil.rmtree(folder, ignore_errors=True)


def shlex_quote(value: str) -> str:
    import shlex

    return shlex.quote(value)


if __name__ == "__main__":
    sys.exit(main())
