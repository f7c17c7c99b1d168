"""An AWS cluster's whole life on the simulated cloud (tests/cloud.py): `check`, `up` through
Ray's own AWS provider (IAM role, security group, key pair made by Ray's bootstrap, the head
launched, Ray started over SSH), the autoscaler on the head adding workers with the head's own
credentials for a run that needs them, taking them away when idle, autostop archiving to S3 and
taking the whole cluster down from the head, `up` again on instances whose addresses moto hands
out anew, `down`; then a GitOps project of two runners with its state in S3 creating, updating
and deleting an AWS cluster. The cluster file is what a user writes for AWS
(cluster_configs/aws-gpu.yaml's shape): no key, no subnet, no endpoint; the cloud's settings
come in the SDK's own variables.

Only AWS's API is faked (moto, at the wire); every instance is a simulated host with its own
sshd, and what runs on it is Ray and orchestrate as on a real instance.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.util.waiting import until
from tests import prerequisites
from tests.cloud import BUCKET, Cloud

from .conftest import orchestrate

pytestmark = [pytest.mark.ssh]

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "experiments" / "data"
IMAGE = "ami-785db401"    # an Ubuntu image moto knows (its contents: the test hosts' venv)
# The autoscaler takes idle workers away after a minute (Ray's minimum is a fraction of one;
# a minute keeps the test's wait short and the run's workers up while it runs); the head's
# watcher takes the cluster down after two idle minutes, once the extra workers are gone.
IDLE_TIMEOUT_MINUTES = 1
AUTOSTOP_IDLE_MINUTES = 2


def cluster_file(folder: Path, name: str, *, max_workers: int = 3, min_workers: int = 1,
                 profiles: tuple[str, str] | None = None, head_cpus: int | None = 0,
                 **extra) -> Path:
    config = {
        "cluster_name": name,
        "max_workers": max_workers,
        "idle_timeout_minutes": IDLE_TIMEOUT_MINUTES,
        "provider": {"type": "aws", "region": "us-east-1",
                     "availability_zone": "us-east-1a,us-east-1b",
                     "use_internal_ips": True, "cache_stopped_nodes": False},
        "auth": {"ssh_user": "ubuntu"},
        "available_node_types": {
            "head": {"node_config": {"InstanceType": "m5.large", "ImageId": IMAGE},
                     "resources": {} if head_cpus is None else {"CPU": head_cpus}},
            "cpu_worker": {"node_config": {"InstanceType": "m5.large", "ImageId": IMAGE,
                                           "InstanceMarketOptions": {"MarketType": "spot"}},
                           "resources": {}, "min_workers": min_workers,
                           "max_workers": max_workers}},
        "head_node_type": "head",
        **extra,
    }
    if profiles:   # instance profiles of the account's own (else Ray's, for the head alone)
        for node_type, profile in zip(("head", "cpu_worker"), profiles, strict=True):
            config["available_node_types"][node_type]["node_config"]["IamInstanceProfile"] = \
                {"Name": profile}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def experiment_file(folder: Path, cluster: Path | str, name: str, workers: int,
                    cpus: int = 2) -> Path:
    (folder / "data").mkdir(exist_ok=True)
    shutil.copy(DATA / "breast_cancer_train.csv", folder / "data" / "train.csv")
    config = {"name": name, "cluster": str(cluster), "trainer": "torch",
              "model": {"name": "mlp", "hidden_dims": [8], "num_classes": 2},
              "datasets": {"train": {"format": "csv", "path": "data/train.csv"}},
              "label_column": "target",
              "train_loop_config": {"lr": 0.01, "epochs": 2, "batch_size_per_worker": 64},
              # two CPUs a worker: each needs a node of its own (an m5.large)
              "scaling_config": {"num_workers": workers, "resources_per_worker": {"CPU": cpus}}}
    # no storage_path: the cluster's `storage:`
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class User:
    """A user's shell: the SDK's settings for the simulated cloud, a home of its own (Ray's
    bootstrap writes the key pair it makes to ~/.ssh), an ORCHESTRATE_HOME."""

    def __init__(self, cloud: Cloud, folder: Path, orchestrate_home: str = "orchestrate") -> None:
        (folder / "home").mkdir(parents=True, exist_ok=True)
        self.cloud = cloud
        self.home = folder / orchestrate_home
        self.env = {**os.environ, **cloud.env, "HOME": str(folder / "home"),
                    "ORCHESTRATE_HOME": str(self.home), "RAY_USAGE_STATS_ENABLED": "0"}
        self.said: list[str] = []
        self.printed: list[str] = []   # everything printed, whole

    def __call__(self, *args: str, ok: bool = True, timeout: float = 900, cwd=None):
        done = orchestrate(self.env, *args, timeout=timeout, cwd=cwd)
        self.printed += [done.stdout, done.stderr]
        self.said.append(f"$ orchestrate {' '.join(args)} -> {done.returncode}\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
        if ok:
            assert done.returncode == 0, self.story()
        return done

    def story(self) -> str:
        return "\n".join(self.said[-4:]) + "\n" + self.cloud.describe()


def instances(cloud: Cloud, cluster: str, states=("pending", "running")) -> list[dict]:
    ec2 = cloud.client("ec2")
    found = ec2.describe_instances(Filters=[
        {"Name": "tag:ray-cluster-name", "Values": [cluster]},
        {"Name": "instance-state-name", "Values": list(states)}])
    return [i for r in found["Reservations"] for i in r["Instances"]]


def kinds(cloud: Cloud, cluster: str) -> list[str]:
    return sorted(next(t["Value"] for t in i.get("Tags", []) if t["Key"] == "ray-node-type")
                  for i in instances(cloud, cluster))


def account_roles(cloud: Cloud) -> None:
    """The account's IAM as a user's infrastructure code makes it for Ray (Ray's bootstrap gives
    its own role to the head alone): the head's role may launch and end instances, write S3 and
    pass the workers' role; the workers' may use S3 (they write the checkpoints)."""
    iam = cloud.client("iam")
    trust = json.dumps({"Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                       "Principal": {"Service": "ec2.amazonaws.com"}}]})
    for role, managed, inline in (
            ("sim-head", ["AmazonEC2FullAccess", "AmazonS3FullAccess"], ["iam:PassRole"]),
            ("sim-worker", ["AmazonS3FullAccess"], [])):
        iam.create_role(RoleName=role, AssumeRolePolicyDocument=trust)
        for policy in managed:
            iam.attach_role_policy(RoleName=role, PolicyArn=f"arn:aws:iam::aws:policy/{policy}")
        if inline:
            iam.put_role_policy(RoleName=role, PolicyName="pass", PolicyDocument=json.dumps({
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": inline, "Resource": "*"}]}))
        iam.create_instance_profile(InstanceProfileName=role)
        iam.add_role_to_instance_profile(InstanceProfileName=role, RoleName=role)


def status_of(user: User, name: str) -> dict:
    [row] = json.loads(user("status", name, "--format", "json").stdout)
    return row


@pytest.fixture
def cloud(tmp_path_factory):   # moto's data is per process: one cloud a test
    prerequisites.require()
    simulated = Cloud.start(tmp_path_factory.mktemp("cloud"))
    try:
        yield simulated
    finally:
        simulated.close()


def test_an_aws_cluster_goes_up_trains_scales_stops_itself_and_comes_back(cloud, tmp_path):
    started = time.monotonic()
    user = User(cloud, tmp_path)
    name = "sim"
    account_roles(cloud)
    file = cluster_file(tmp_path, name, profiles=("sim-head", "sim-worker"),
                        autostop={"idle_minutes": AUTOSTOP_IDLE_MINUTES},
                        archive=f"s3://{BUCKET}/archive", storage=f"s3://{BUCKET}/runs")
    timeline: list[str] = []
    bystander = ""
    try:
        # 1. check on moto, then up through Ray's AWS provider
        user("check", str(file))
        up = user("up", str(file), "-y", "--format", "json", "--wait-timeout", "300")
        head_ip = json.loads(up.stdout)["head_ip"] if "head_ip" in up.stdout else None
        assert kinds(cloud, name) == ["head", "worker"], user.story()
        [head] = [i for i in instances(cloud, name)
                  if {"Key": "ray-node-type", "Value": "head"} in i["Tags"]]
        assert head["IamInstanceProfile"]["Arn"].endswith("instance-profile/sim-head")
        assert head["KeyName"].startswith("ray-autoscaler_")
        groups = cloud.client("ec2").describe_security_groups(
            Filters=[{"Name": "group-name", "Values": [f"ray-autoscaler-{name}"]}])
        assert groups["SecurityGroups"], user.story()
        assert head_ip in (None, head["PrivateIpAddress"])
        row = status_of(user, name)
        assert row["live"]["nodes_alive"] == 2, user.story()
        # list prices of the head and the min worker (spot) from the catalog, named
        assert row["price"]["now"] > 0 and "list prices" in row["price"]["source"], row["price"]
        assert f"${row['price']['now']:.2f} (" in user("status", name).stdout, user.story()
        timeline = [f"up {time.monotonic() - started:.0f} s"]

        # 2. a run that needs three workers of two CPUs: the autoscaler adds two instances,
        # whose hosts appear and join; the run succeeds and answers `results` and `logs`
        (tmp_path / "wide").mkdir()   # the experiment's folder is its working_dir
        exp = experiment_file(tmp_path / "wide", file, "wide", workers=3)
        ran = user("run", str(exp), "--format", "json", timeout=900)
        summary = json.loads(ran.stdout)
        assert summary["status"] == "SUCCEEDED" and summary["cluster"] == name, user.story()
        assert summary["run_path"] == f"s3://{BUCKET}/runs/wide"   # the cluster's `storage:`
        job = summary["job_id"]
        assert len(instances(cloud, name)) == 4, user.story()
        assert "accuracy" in user("results", "wide").stdout, user.story()
        assert "ORCHESTRATE_RESULT" in user("logs", job).stdout + user.said[-1], user.story()
        timeline.append(f"run {time.monotonic() - started:.0f} s")

        # 3. idle: the autoscaler takes the extra workers away (terminated in moto), then the
        # head's watcher archives the logs to S3 and takes the whole cluster down
        assert until(lambda: len(instances(cloud, name)) == 2,
                     timeout=IDLE_TIMEOUT_MINUTES * 60 + 180, interval=2), user.story()
        timeline.append(f"scaled down {time.monotonic() - started:.0f} s")
        bystander = cloud.client("ec2").run_instances(
            ImageId=IMAGE, InstanceType="m5.large", MinCount=1, MaxCount=1,
            SubnetId=cloud.subnets["us-east-1a"])["Instances"][0]["InstanceId"]
        assert until(lambda: not instances(cloud, name),
                     timeout=AUTOSTOP_IDLE_MINUTES * 60 + 180, interval=2), user.story()
        timeline.append(f"autostopped {time.monotonic() - started:.0f} s")
        assert bystander in cloud.running(), "autostop took an instance of no cluster down"
        assert until(lambda: status_of(user, name)["autostop"].get("stopped_at"), timeout=60)
        row = status_of(user, name)
        assert row["autostop"]["reason"] == f"idle for {AUTOSTOP_IDLE_MINUTES:g} min", row
        assert row["state"] == "stopped", row
        kept = cloud.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=f"archive/{name}/")
        assert any(o["Key"].endswith("stopped.json") for o in kept.get("Contents", [])), kept
        shown = user("logs", job, "--cluster", name)
        assert "ORCHESTRATE_RESULT" in shown.stdout, user.story()

        # 4. up again: new instances (moto hands the terminated ones' addresses out again, to
        # machines with new host keys), then down leaves no instance of the cluster running
        # The new head is given the old head's address (AWS may do so; here for certain): a
        # machine with another host key where this machine pinned one. The cloud says the
        # cluster's head is gone, so `up` forgets the pins of its instances (docs/security.md).
        first_key = cloud.folder / "instances" / head["InstanceId"] / "host_key.pub"
        cloud.next_address(head["PrivateIpAddress"])
        again = user("up", str(file), "-y", "--format", "json", "--wait-timeout", "300")
        assert json.loads(again.stdout)["head_ip"] == head["PrivateIpAddress"], user.story()
        assert "host keys pinned for them are forgotten" in again.stderr, user.story()
        [new_head] = [i for i in instances(cloud, name)
                      if {"Key": "ray-node-type", "Value": "head"} in i["Tags"]]
        assert new_head["InstanceId"] != head["InstanceId"]
        new_key = cloud.folder / "instances" / new_head["InstanceId"] / "host_key.pub"
        assert new_key.read_text().split()[1] != first_key.read_text().split()[1]
        pinned = (tmp_path / "orchestrate" / "clusters" / name / "known_hosts").read_text()
        assert new_key.read_text().split()[1] in pinned and \
            first_key.read_text().split()[1] not in pinned, pinned
        assert len(instances(cloud, name)) == 2, user.story()
        assert status_of(user, name)["live"]["nodes_alive"] == 2, user.story()
        timeline.append(f"up again {time.monotonic() - started:.0f} s")
        assert again
    finally:
        user("down", name, "-y", ok=False, timeout=600)
        print(user.story())
        print(f"timeline: {', '.join(timeline)}")
    assert not instances(cloud, name), user.story()
    assert cloud.running() == {bystander: cloud.running()[bystander]}


@pytest.mark.ray   # one experiment runs on the runner's embedded Ray
def test_two_runners_create_update_and_delete_an_aws_cluster_of_one_project(
        cloud, tmp_path):
    """GitOps on the same simulated AWS, as two CI runners run it: the project's state and lock
    in S3, its token in Secrets Manager, and two ORCHESTRATE_HOME folders sharing nothing but
    them (and the user's home, where Ray's bootstrap keeps the key pair it made: a runner on
    another machine lacks it). Runner A's `apply` creates the cluster and runs the experiments;
    B's plan changes nothing and starts nothing; a larger `max_workers` is planned and applied
    by B in place (the head instance stays) and A sees it; the file's removal is a delete that
    needs --allow-destructive. A third runner on another machine, which cannot log in to the
    head, is told so and plans no restart. The token is never printed, logged or written into
    state. (The
    lock, a stale saved plan and SIGTERM during an apply are the fast tier's, on moto's S3:
    tests/state/test_backends.py, tests/gitops/test_commands.py.)"""
    a = User(cloud, tmp_path, "runner-a")
    b = User(cloud, tmp_path, "runner-b")
    root = tmp_path / "repo"
    (root / "clusters").mkdir(parents=True)
    (root / "orchestrate.yaml").write_text(yaml.safe_dump({
        "project": "sim", "include": ["clusters/*.yaml", "experiments/*.yaml"],
        "state": f"s3://{BUCKET}/state", "secrets": "aws-sm://orc/sim/"}))
    name = "proj"
    # Ray's own role for the head (its bootstrap makes it), which may write S3; the run fits on
    # the head (an m5.large's 2 CPUs), so no worker needs credentials
    file = cluster_file(root / "clusters", name, max_workers=2, min_workers=0, head_cpus=None,
                        storage=f"s3://{BUCKET}/project")
    (root / "experiments").mkdir()
    experiment_file(root / "experiments", "../clusters/proj.yaml", "first", workers=1, cpus=1)
    # and one on the runner's embedded Ray, which stays when the cluster's files go (a project
    # keeps at least one file: removing every file is `down` and `state rm`, not an apply)
    beside = yaml.safe_load((root / "experiments" / "first.yaml").read_text())
    del beside["cluster"]
    beside.update(name="beside", run_config={"storage_path": "../results"})
    (root / "experiments" / "beside.yaml").write_text(yaml.safe_dump(beside))
    s3 = cloud.client("s3")

    def plan(runner: User) -> dict[str, str]:
        done = runner("plan", "--format", "json", cwd=root)
        return {c["address"]: c["action"] for c in json.loads(done.stdout)["changes"]}

    def state() -> dict:
        return json.loads(s3.get_object(Bucket=BUCKET, Key="state/state.json")["Body"].read())

    unchanged = {f"cluster/{name}": "no-op", "experiment/first": "no-op",
                 "experiment/beside": "no-op"}
    token = None
    try:
        assert plan(a) == {f"cluster/{name}": "create", "experiment/first": "submit",
                           "experiment/beside": "submit"}
        # The first apply: the cluster comes up (on Ray's default settings, as users have
        # them: issue 48's first apply was refused by a load report that counted the head
        # alone) and the experiment runs on it, followed to its end.
        applied = json.loads(a("apply", "-y", "--wait", "--format", "json", cwd=root).stdout)
        assert applied["results"] == {"first": "SUCCEEDED", "beside": "SUCCEEDED"}, a.story()
        [head] = instances(cloud, name)
        assert head["IamInstanceProfile"]["Arn"].endswith("instance-profile/ray-autoscaler-v1")
        token = cloud.client("secretsmanager").get_secret_value(
            SecretId=f"orc/sim/clusters/{name}")["SecretString"]
        assert state()["resources"][f"cluster/{name}"]["token"]["ref"] == \
            f"aws-sm://orc/sim/clusters/{name}"
        assert plan(a) == unchanged

        # B, with nothing of its own, plans no changes and starts nothing
        host = cloud.host(head["PrivateIpAddress"])
        assert host is not None
        gcs = host.pids("gcs_server")
        assert len(gcs) == 1, gcs   # the head's GCS: one, so the comparisons below mean something
        done = b("plan", "--detailed-exitcode", cwd=root)
        assert "No changes" in done.stdout, b.story()
        assert not (b.home / "clusters").exists()                  # no cluster checked out,
        assert not (b.home / "local-ray" / "record.json").exists()  # no embedded Ray started
        assert [i["InstanceId"] for i in instances(cloud, name)] == [head["InstanceId"]]
        assert host.pids("gcs_server") == gcs

        # C, on another machine (another home: without the key pair Ray's bootstrap made on
        # A's), cannot log in to the head: that is said, and is no reason to restart it
        c = User(cloud, tmp_path / "elsewhere", "runner-c")
        done = c("plan", "--format", "json", cwd=root)
        planned = json.loads(done.stdout)
        assert {x["address"]: x["action"] for x in planned["changes"]} == unchanged, c.story()
        said = json.dumps(planned.get("drift"))
        assert "Permission denied" in said and "auth.ssh_private_key" in said, c.story()
        shown = c("plan", "--detailed-exitcode", cwd=root).stdout   # no change: exit 0
        assert "not checked" in shown and "restart" not in shown, c.story()
        print(shown)
        assert host.pids("gcs_server") == gcs

        # B plans and applies a larger max_workers in place; A sees it
        file.write_text(file.read_text().replace("max_workers: 2", "max_workers: 3"))
        assert plan(b)[f"cluster/{name}"] == "update"
        assert b("plan", "--detailed-exitcode", ok=False, cwd=root).returncode == 2, b.story()
        serial = state()["serial"]
        b("apply", "-y", cwd=root)
        assert state()["serial"] == serial + 1
        assert [i["InstanceId"] for i in instances(cloud, name)] == [head["InstanceId"]]
        assert host.pids("gcs_server") == gcs, "the update restarted Ray on the head"
        assert plan(a) == unchanged

        file.unlink()
        (root / "experiments" / "first.yaml").unlink()
        assert plan(a)[f"cluster/{name}"] == "delete"
        refused = a("apply", "-y", cwd=root, ok=False)
        assert refused.returncode != 0 and "--allow-destructive" in refused.stderr, a.story()
        assert instances(cloud, name), "a refused delete took the cluster down"
        a("apply", "-y", "--allow-destructive", cwd=root)
        assert not instances(cloud, name), a.story()
        assert f"cluster/{name}" not in plan(a)

        # the token: never printed, logged, or written into state
        logs = [p for runner in (a, b) for p in runner.home.rglob("*.log") if p.is_file()]
        texts = a.printed + b.printed + [p.read_text(errors="replace") for p in logs]
        assert all(token not in text for text in [*texts, json.dumps(state())])
    finally:
        a("stop", "--embedded", ok=False, timeout=120)   # the runner's embedded Ray
        if instances(cloud, name):
            file = cluster_file(tmp_path, name, max_workers=3, min_workers=0)
            a("down", str(file), "-y", ok=False, timeout=600)
            print(a.story())
            print(b.story())


def test_an_instance_may_do_what_its_role_allows_and_no_more(cloud):
    """IAM is enforced on the simulated cloud: an instance's credentials are a session of its
    profile's role, so a head whose role may not terminate instances is refused as on AWS
    (autostop's takedown would fail, which `check` reports as `head credentials`)."""
    iam, ec2 = cloud.client("iam"), cloud.client("ec2")
    trust = json.dumps({"Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                       "Principal": {"Service": "ec2.amazonaws.com"}}]})
    iam.create_role(RoleName="describe-only", AssumeRolePolicyDocument=trust)
    iam.put_role_policy(RoleName="describe-only", PolicyName="p", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"}]}))
    iam.create_instance_profile(InstanceProfileName="describe-only")
    iam.add_role_to_instance_profile(InstanceProfileName="describe-only", RoleName="describe-only")
    launched = [ec2.run_instances(ImageId=IMAGE, InstanceType="m5.large", MinCount=1, MaxCount=1,
                                  SubnetId=cloud.subnets["us-east-1a"], **extra)["Instances"][0]
                for extra in ({"IamInstanceProfile": {"Name": "describe-only"}}, {})]
    assert until(lambda: len(cloud.running()) == 2, timeout=30), cloud.describe()
    host = cloud.host(launched[0]["PrivateIpAddress"])
    other = launched[1]["InstanceId"]
    script = ("import boto3, botocore\n"
              "ec2 = boto3.client('ec2')\n"
              "print(len(ec2.describe_instances()['Reservations']))\n"
              "try:\n"
              f"    ec2.terminate_instances(InstanceIds=['{other}'])\n"
              "    print('terminated')\n"
              "except botocore.exceptions.ClientError as exc:\n"
              "    print(exc.response['Error']['Code'])\n")
    (cloud.folder / "probe.py").write_text(script)
    done = host.in_host(f"bash -lc 'source ~/.bashrc; python {cloud.folder / 'probe.py'}'",
                        shell=True, check=False)
    said = done.stdout.split()
    # moto answers AccessDenied where EC2 says UnauthorizedOperation: both are a refusal
    assert said[:1] == ["2"] and said[1:] in (["AccessDenied"], ["UnauthorizedOperation"]), \
        (done.stdout, done.stderr[-2000:])
    assert other in cloud.running()
    cloud.check()
