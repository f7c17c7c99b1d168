"""The job client without a cluster: Ray's errors become JobError, the token travels as a
bearer header."""
from __future__ import annotations

import socket

import pytest

from orchestrator.endpoint import Endpoint
from orchestrator.errors import JobError
from orchestrator.jobs.client import JobsClient


def test_unreachable_address_is_a_job_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once closed
    with pytest.raises(JobError) as caught:
        JobsClient(Endpoint(f"http://127.0.0.1:{port}", None, "cluster x")).list()
    assert "cluster x" in caught.value.message


def test_token_is_sent_as_bearer_header(monkeypatch):
    seen = {}

    class FakeClient:
        def __init__(self, address, headers=None):
            seen.update(address=address, headers=headers)

    import ray.job_submission

    monkeypatch.setattr(ray.job_submission, "JobSubmissionClient", FakeClient)
    JobsClient(Endpoint("http://10.0.0.1:8265", "s3cret", "cluster y"))
    assert seen["headers"] == {"Authorization": "Bearer s3cret"}
