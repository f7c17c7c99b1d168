"""Reading a cluster's archive in S3 from this machine (`cluster.archive.find_job`, what `logs`
and `runs` use once a cluster is gone), against moto's server over real HTTP: what is there is
found; S3 that does not answer, a bucket that does not exist, no credentials, no boto3 give a
message saying what to do (`logs`: an error; `runs`: a warning, once, and "not found")."""
from __future__ import annotations

import contextlib
import io
import json
import socket
import sys

import pytest

from orchestrator.cluster import archive
from orchestrator.errors import ClusterError
from orchestrator.state import State
from tests.moto_server import client, make_bucket

JOB = "job-1"
STAMP = "20261126T120000Z-down"


def config(uri: str) -> dict:
    return {"cluster_name": "c", "metadata": {"orchestrate": {"archive": uri}}}


def cli(*args: str) -> tuple[int, str, str]:
    from orchestrator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_a_job_archived_in_s3_is_found_and_its_log_kept_here(aws_env):
    make_bucket(aws_env, "logs")
    s3 = client(aws_env, "s3")
    s3.put_object(Bucket="logs", Key=f"p/c/{STAMP}/jobs.json", Body=json.dumps(
        [{"submission_id": JOB, "status": "FAILED", "message": "boom", "start_time": 1000}]))
    s3.put_object(Bucket="logs", Key=f"p/c/{STAMP}/jobs/{JOB}.log", Body=b"line\n")
    found = archive.find_job("c", JOB, config("s3://logs/p"))
    assert found is not None and (found.status, found.message) == ("FAILED", "boom")
    assert found.log() == "line\n" and found.log_path.is_relative_to(archive.local_folder("c"))
    assert archive.find_job("c", "other-job", config("s3://logs/p")) is None
    assert archive.find_job("c", JOB, config("s3://logs/elsewhere")) is None


def test_a_bucket_that_does_not_exist(aws_env):
    with pytest.raises(ClusterError) as caught:
        archive.find_job("c", JOB, config("s3://no-such-bucket/p"))
    assert caught.value.message == ("the archive s3://no-such-bucket/p/c cannot be read: its "
                                    "bucket does not exist")
    assert caught.value.hint == "check `archive:` in the cluster file"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_s3_that_does_not_answer(aws_env, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(ClusterError) as caught:
        archive.find_job("c", JOB, config("s3://logs/p"))
    assert caught.value.message.startswith(
        "the archive s3://logs/p/c cannot be read: S3 did not answer (Could not connect")
    assert "AWS_ENDPOINT_URL" in caught.value.hint


def test_no_credentials_and_no_boto3(aws_env, monkeypatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    with pytest.raises(ClusterError) as caught:
        archive.find_job("c", JOB, config("s3://logs/p"))
    assert caught.value.message.startswith("the archive s3://logs/p/c cannot be read: no AWS "
                                           "credentials here")
    assert caught.value.hint.startswith("AWS credentials for s3://logs/p/c (s3:ListBucket")
    monkeypatch.setitem(sys.modules, "boto3", None)    # the `aws` extra not installed
    with pytest.raises(ClusterError) as caught:
        archive.find_job("c", JOB, config("s3://logs/p"))
    assert caught.value.hint == 'pip install "orchestrate-ray[aws]"'


def test_logs_says_why_and_runs_warns_once(aws_env, monkeypatch):
    """A cluster gone (forgotten here): its archive remembered in a bucket that is gone too."""
    state = State.here()
    for job in (JOB, "job-2"):
        state.store.record_job(job, cluster="c", experiment="/x/e.yaml", name="e")
    archive.remember("c", f"s3://no-such-bucket/p/c/{STAMP}")
    code, out, err = cli("logs", JOB)
    assert code == 1 and out == "" and "Traceback" not in err
    assert f"the archive s3://no-such-bucket/p/c/{STAMP} cannot be read: its bucket does not " \
           "exist" in err and "check `archive:` in the cluster file" in err

    made = []
    real = archive._s3
    monkeypatch.setattr(archive, "_s3", lambda where: made.append(where) or real(where))
    code, out, err = cli("runs", "--format", "json")
    assert code == 0 and "Traceback" not in err
    assert {row["job_id"]: row["status"] for row in json.loads(out)} == \
        {JOB: "UNKNOWN", "job-2": "UNKNOWN"}
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: the archive s3://no-such-bucket/p/c/{STAMP} cannot be read: "
                        "its bucket does not exist (check `archive:` in the cluster file)"]
    assert len(made) == 1     # read once for both runs
