"""A cluster's logs archived on its head (`orchestrator.head.archive`, issue 32) and read back
by `orchestrate logs` once the cluster is forgotten: to a folder every host sees and to S3
(moto's server on the test bridge's address, the one address of this machine the simulated
hosts reach); and `cluster.archive.keep_logs`, what `down` runs: the archiver through the
launch backend's `exec`, the head's own folder copied here."""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from pathlib import Path

import pytest

import orchestrator
from tests.moto_server import REGION

from ..conftest import cli_env, orchestrate, submit_and_wait

pytestmark = [pytest.mark.ssh, pytest.mark.ray, pytest.mark.xdist_group("shared_cluster")]

HEAD_PACKAGE = Path(orchestrator.__file__).parent / "head"
LOG_LINE = "archived-job-says-hello"


@pytest.fixture
def head_archiver(ssh_cluster):
    """The head package on the head, where `up`'s file mount puts it; removed after."""
    head = ssh_cluster.machine.hosts[0]
    head.in_host(f"mkdir -p ~/.orchestrate && cp -r {shlex.quote(str(HEAD_PACKAGE))} "
                 "~/.orchestrate/head", shell=True)
    try:
        yield head
    finally:
        head.in_host("rm -rf ~/.orchestrate ~/archive-test.yaml ~/.aws", shell=True,
                     check=False)


@pytest.fixture
def bridge_moto(ssh_cluster):
    """moto's server on the bridge's address (10.x.y.1), with a bucket."""
    import boto3
    from moto.server import ThreadedMotoServer

    address = f"{ssh_cluster.machine.network.subnet}.1"
    server = ThreadedMotoServer(ip_address=address, port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION,
           "AWS_EC2_METADATA_DISABLED": "true"}
    boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=REGION,
                 aws_access_key_id="testing", aws_secret_access_key="testing"
                 ).create_bucket(Bucket="logs")
    try:
        yield env
    finally:
        server.stop()


def archive_on_head(head, location: str, env: dict[str, str]) -> str:
    """The archiver on the head, its bootstrap config naming `location`; what it printed."""
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    script = ("import os, yaml; path = os.path.expanduser('~/ray_bootstrap_config.yaml'); "
              "c = yaml.safe_load(open(path)); "
              f"c.setdefault('metadata', {{}})['orchestrate'] = {{'archive': {location!r}}}; "
              "yaml.safe_dump(c, open(os.path.expanduser('~/archive-test.yaml'), 'w'))")
    python = shlex.quote(sys.executable)   # the hosts' Ray runs on this venv's Python
    done = head.in_host(f"{python} -c {shlex.quote(script)} && cd ~/.orchestrate && "
                        f"env {exports} {python} -m head.archive --reason test "
                        "--config ~/archive-test.yaml", shell=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def forgotten(cluster: str, job_id: str, uri: str, home: Path) -> dict:
    """A fresh ORCHESTRATE_HOME that sent `job_id` to `cluster`, which is gone: only the
    archive `down` wrote (`remember`) is left."""
    from orchestrator.cluster import archive
    from orchestrator.state import State

    env = cli_env(home)
    with _home(home):
        state = State.here()
        state.store.record_job(job_id, cluster=cluster, experiment="/x/e.yaml", name="e")
        archive.remember(cluster, uri)
    return env


@contextlib.contextmanager
def _home(home: Path):
    before = os.environ.get("ORCHESTRATE_HOME")
    os.environ["ORCHESTRATE_HOME"] = str(home)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("ORCHESTRATE_HOME", None)
        else:
            os.environ["ORCHESTRATE_HOME"] = before


def submitted_job(ssh_cluster) -> str:
    from ray.job_submission import JobSubmissionClient

    with ssh_cluster.open() as endpoint:
        submit_and_wait(endpoint.address, ssh_cluster.headers, f"echo {LOG_LINE}")
        jobs = JobSubmissionClient(endpoint.address, headers=ssh_cluster.headers).list_jobs()
    return next(job.submission_id for job in sorted(jobs, key=lambda j: -(j.start_time or 0))
                if job.entrypoint == f"echo {LOG_LINE}")


def test_the_head_archives_to_a_shared_folder_and_s3_and_logs_reads_them_back(
        ssh_cluster, head_archiver, bridge_moto, shared_dir, tmp_path):
    import boto3

    job_id = submitted_job(ssh_cluster)

    # A folder every host sees: the layout, private
    printed = archive_on_head(head_archiver, f"file://{shared_dir}/kept", {})
    uri = printed.strip().removeprefix("archived to ")
    folder = Path(uri.removeprefix("file://"))
    assert folder.parent == shared_dir / "kept" / ssh_cluster.name and folder.name.endswith("-test")
    assert (folder / "jobs" / f"{job_id}.log").read_text().strip().endswith(LOG_LINE)
    table = {job["submission_id"]: job for job in json.loads((folder / "jobs.json").read_text())}
    assert table[job_id]["status"] == "SUCCEEDED"
    assert any((folder / "session").rglob("raylet.out"))
    assert json.loads((folder / "stopped.json").read_text())["reason"] == "test"
    for path in [folder, *folder.rglob("*")]:
        assert path.stat().st_mode & 0o777 == (0o700 if path.is_dir() else 0o600), path
    env = forgotten(ssh_cluster.name, job_id, uri, tmp_path / "gone")
    shown = orchestrate(env, "logs", job_id)
    assert shown.returncode == 0 and shown.stdout.strip().endswith(LOG_LINE), shown.stderr
    assert f"cluster {ssh_cluster.name} no longer has job {job_id} (SUCCEEDED)" in shown.stderr

    # S3 (moto on the bridge), read back here through boto3
    printed = archive_on_head(head_archiver, "s3://logs/team", bridge_moto)
    uri = printed.strip().removeprefix("archived to ")
    assert uri.startswith(f"s3://logs/team/{ssh_cluster.name}/")
    s3 = boto3.client("s3", endpoint_url=bridge_moto["AWS_ENDPOINT_URL"], region_name=REGION,
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    prefix = uri.removeprefix("s3://logs/")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="logs", Prefix=prefix)["Contents"]}
    assert {f"{prefix}/jobs.json", f"{prefix}/jobs/{job_id}.log", f"{prefix}/stopped.json",
            f"{prefix}/README"} <= keys
    env = {**forgotten(ssh_cluster.name, job_id, uri, tmp_path / "gone-s3"), **bridge_moto}
    shown = orchestrate(env, "logs", job_id, "--follow")
    assert shown.returncode == 0 and shown.stdout.strip().endswith(LOG_LINE), shown.stderr
    assert f"job {job_id}: SUCCEEDED" in shown.stderr


def test_keep_logs_runs_the_heads_archiver_and_copies_its_folder_here(ssh_cluster,
                                                                      head_archiver):
    """What `down` does first: no archive named, so the head's folder comes here."""
    from orchestrator.cluster import archive
    from orchestrator.state import State

    job_id = submitted_job(ssh_cluster)
    said: list[str] = []
    with _home(ssh_cluster.home):
        state = State.here()
        record = state.store.read_cluster(ssh_cluster.name)
        where = archive.keep_logs(record, state.store.read_rendered(ssh_cluster.name), state,
                                  said.append)
        kept = Path(where)
        assert kept.parent == archive.local_folder(ssh_cluster.name)
        assert archive.remembered(ssh_cluster.name)[0] == where
        found = archive.find_job(ssh_cluster.name, job_id, None)
    assert not any("no archiver" in line for line in said), said   # the head's own ran
    assert any((kept / "session").rglob("raylet.out"))   # only the head has those
    assert found is not None and found.log().strip().endswith(LOG_LINE)
    for path in [kept, *kept.rglob("*")]:
        assert path.stat().st_mode & 0o777 == (0o700 if path.is_dir() else 0o600), path
