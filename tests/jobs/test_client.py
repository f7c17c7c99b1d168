"""The job client without a cluster: Ray's errors become JobError, the token travels as a
bearer header."""
from __future__ import annotations

import socket

import pytest

from orchestrator.errors import JobError
from orchestrator.jobs.client import JobsClient
from orchestrator.reach.endpoint import Endpoint


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


@pytest.mark.parametrize("starting", ["no agent", "dropped"])
def test_submit_waits_for_a_job_agent_that_is_still_starting(starting):
    """A loopback HTTP server answers as Ray's dashboard does while its job agent starts (HTTP
    500 "No available agent to submit job, please try again later", or a connection closed
    without an answer) twice, then accepts."""
    import http.server
    import json
    import threading

    posts: list[str] = []

    class Dashboard(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, status: int, body: str, kind: str = "application/json") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            import ray

            self._send(200, json.dumps({"version": "4", "ray_version": ray.__version__,
                                        "ray_commit": ray.__commit__}))

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            posts.append(json.loads(body)["submission_id"])
            if len(posts) <= 2 and starting == "dropped":
                self.close_connection = True   # no answer at all
            elif len(posts) <= 2:
                self._send(500, "No available agent to submit job, please try again later.",
                           "text/plain")
            else:
                self._send(200, json.dumps({"job_id": "j", "submission_id": posts[-1]}))

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Dashboard)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = JobsClient(Endpoint(f"http://127.0.0.1:{server.server_port}", None, "local"))
        assert client.submit(entrypoint="true", runtime_env={}, submission_id="s-1") is True
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert posts == ["s-1", "s-1", "s-1"]
