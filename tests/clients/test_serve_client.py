"""The Serve client without a cluster: a loopback HTTP server answers as Ray's dashboard does on
/api/serve/applications/ (GET, PUT), behind a bearer token."""
from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.clients.serve import API, ServeClient, failure, routes, running_configs
from orchestrator.errors import ServeError
from orchestrator.reach.endpoint import Endpoint

TOKEN = "s3cret"


class FakeServe:
    """What the handler answers and what it was sent."""

    def __init__(self) -> None:
        self.answers: list[dict[str, Any]] = [{}]   # GET answers in turn; the last repeats
        self.put_status = 200
        self.put_text = ""
        self.requests: list[tuple[str, str, str | None, Any]] = []   # method, path, auth, body


@pytest.fixture
def serve() -> Iterator[tuple[FakeServe, str]]:
    fake = FakeServe()

    class Dashboard(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _allowed(self) -> bool:
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._send(401, "Unauthorized")
                return False
            return True

        def do_GET(self) -> None:
            fake.requests.append(("GET", self.path, self.headers.get("Authorization"), None))
            if self._allowed():
                answer = fake.answers.pop(0) if len(fake.answers) > 1 else fake.answers[0]
                self._send(200, json.dumps(answer))

        def do_PUT(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            fake.requests.append(("PUT", self.path, self.headers.get("Authorization"), body))
            if self._allowed():
                self._send(fake.put_status, fake.put_text)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Dashboard)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def client(address: str, token: str | None = TOKEN, **kwargs: Any) -> ServeClient:
    return ServeClient(Endpoint(address, token, "cluster x"), **kwargs)


def test_details_are_asked_with_the_token(serve):
    fake, address = serve
    fake.answers = [{"applications": {"a": {"status": "RUNNING", "route_prefix": "/a",
                                            "deployed_app_config": {"name": "a"}}}}]
    details = client(address).details()
    assert fake.requests == [("GET", API, f"Bearer {TOKEN}", None)]
    assert running_configs(details) == [{"name": "a"}]
    assert routes(details) == [{"name": "a", "route_prefix": "/a"}]
    assert client(address).application("a") == details["applications"]["a"]
    assert client(address).application("b") is None


def test_a_refused_token_and_no_answer_are_serve_errors_naming_the_endpoint(serve):
    _fake, address = serve
    with pytest.raises(ServeError) as caught:
        client(address, token="wrong").details()
    assert caught.value.message.startswith("cluster x: the Serve API did not answer: HTTP 401")
    with pytest.raises(ServeError):
        client("http://127.0.0.1:9").details()   # nothing listens on the discard port


def test_put_sends_every_application_and_keeps_the_proxy_location(serve):
    fake, address = serve
    apps = [{"name": "a"}, {"name": "b"}]
    client(address).put({"proxy_location": "EveryNode"}, {"host": "0.0.0.0", "port": 8000}, apps)
    client(address).put({}, {"port": 8001}, apps[:1])
    bodies = [body for method, _path, _auth, body in fake.requests if method == "PUT"]
    assert bodies == [
        {"proxy_location": "EveryNode", "http_options": {"host": "0.0.0.0", "port": 8000},
         "applications": apps},
        {"proxy_location": "HeadOnly", "http_options": {"port": 8001}, "applications": apps[:1]}]


def test_a_refused_put_says_why(serve):
    fake, address = serve
    fake.put_status, fake.put_text = 400, "first line\nroute_prefix '/a' is taken"
    with pytest.raises(ServeError) as caught:
        client(address).put({}, {}, [])
    assert caught.value.message == ("cluster x: Serve refused the applications: HTTP 400: "
                                    "route_prefix '/a' is taken")


def test_wait_says_each_status_once_until_running(serve):
    fake, address = serve
    fake.answers = [{}, {"applications": {"a": {"status": "DEPLOYING"}}},
                    {"applications": {"a": {"status": "DEPLOYING"}}},
                    {"applications": {"a": {"status": "RUNNING"}}}]
    said: list[str] = []
    assert client(address, interval=0.01).wait("a", said.append) == "RUNNING"
    assert said == ["  a: NOT_STARTED", "  a: DEPLOYING", "  a: RUNNING"]


def test_wait_stops_at_a_failed_deployment_with_its_message(serve):
    fake, address = serve
    app = {"status": "DEPLOY_FAILED", "message": "app",
           "deployments": {"d": {"message": "Traceback...\nValueError: no model card"}}}
    fake.answers = [{"applications": {"a": app}}]
    with pytest.raises(ServeError) as caught:
        client(address, interval=0.01).wait("a", lambda _: None)
    assert caught.value.message == "a failed to deploy: ValueError: no model card"
    assert failure({"message": "only the app's\nits reason"}) == "its reason"


def test_wait_for_gone_and_the_timeout(serve):
    fake, address = serve
    fake.answers = [{"applications": {"a": {}}}, {"applications": {}}]
    assert client(address, interval=0.01).wait("a", lambda _: None, gone=True) == "DELETED"
    fake.answers = [{"applications": {"a": {"status": "DEPLOYING"}}}]
    with pytest.raises(ServeError) as caught:
        client(address, timeout=0.2, interval=0.05).wait("a", lambda _: None)
    assert caught.value.message == "a was not RUNNING after 0 s"
