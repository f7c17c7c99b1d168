"""The dashboard HTTP helpers against a real HTTP server on loopback."""
from __future__ import annotations

import http.server as server_lib
import json
import threading

import pytest

from orchestrator.util import http
from orchestrator.util.ports import free_port


class Handler(server_lib.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        if self.headers.get("Authorization") != "Bearer right":
            self.send_response(401)
            self.end_headers()
            return
        body = b"not json" if self.path == "/text" else json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = server_lib.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_get_json_sends_the_token_and_reports_refusals(server):
    assert http.get_json(server, "/api/x", "right") == {"path": "/api/x"}
    with pytest.raises(http.HttpError) as refused:
        http.get_json(server, "/api/x", "wrong")
    assert refused.value.status == 401
    with pytest.raises(http.HttpError) as garbled:
        http.get_json(server, "/text", "right")
    assert garbled.value.status is None


def test_answers_means_any_http_reply_without_a_token_and_success_with_one(server):
    assert http.answers(server)                          # 401: something is there
    assert http.answers(server, "right", "/text")        # any body counts, JSON or not
    assert not http.answers(server, "wrong")             # with a token, a refusal is no
    assert not http.answers(f"http://127.0.0.1:{free_port()}")  # nothing listens
