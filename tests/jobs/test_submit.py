"""Job submission without a cluster: Ray's errors become JobError, results are parsed from logs,
the token travels as a bearer header."""
from __future__ import annotations

import json
import socket

import pytest

from orchestrator.errors import JobError
from orchestrator.jobs.submit import Jobs, Target, parse_result
from orchestrator.runtime.results import RESULT_MARK


def test_parse_result_takes_the_last_result_line():
    log = "\n".join(["noise", RESULT_MARK + json.dumps({"status": "FAILED"}),
                     "(TrainController pid=1) " + RESULT_MARK + json.dumps({"status": "SUCCEEDED"}),
                     RESULT_MARK + "{not json"])
    assert parse_result(log) == {"status": "SUCCEEDED"}
    assert parse_result("nothing here") is None


def test_unreachable_address_is_a_job_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once closed
    with pytest.raises(JobError) as caught:
        Jobs(Target(f"http://127.0.0.1:{port}", label="cluster x")).list()
    assert "cluster x" in caught.value.message


def test_token_is_sent_as_bearer_header(monkeypatch):
    seen = {}

    class FakeClient:
        def __init__(self, address, headers=None):
            seen.update(address=address, headers=headers)

    import ray.job_submission

    monkeypatch.setattr(ray.job_submission, "JobSubmissionClient", FakeClient)
    Jobs(Target("http://10.0.0.1:8265", token="s3cret"))
    assert seen["headers"] == {"Authorization": "Bearer s3cret"}
