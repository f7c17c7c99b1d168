"""moto's server on loopback, in this process (a thread), for tests of what orchestrate keeps in
AWS (S3 state, Secrets Manager tokens): AWS's API is faked at the wire, nothing of ours is.

    from tests.moto_server import make_bucket, moto_server   # noqa: F401 - a fixture
    def test_x(moto_server, monkeypatch):
        for key, value in moto_server.env.items():
            monkeypatch.setenv(key, value)      # boto3 here, and any child given .env, use it
        make_bucket(moto_server, "b")

One server per pytest process, on a port the OS picked, started for the first test that asks for
it; moto's data is reset after each test, so each starts with moto's fresh AWS. (A server per
test cost each test 0.5 s to stop: werkzeug polls for a shutdown twice a second; 70 tests of the
fast tier paid it.) Child processes reach it too: it answers on 127.0.0.1.
"""
from __future__ import annotations

import urllib.request
from dataclasses import dataclass, field

import pytest

REGION = "us-east-1"


@dataclass(frozen=True)
class MotoServer:
    url: str                                  # http://127.0.0.1:PORT
    env: dict[str, str] = field(default_factory=dict)


_SHARED: list[MotoServer] = []   # this process's server, once started


def _shared() -> MotoServer:
    if not _SHARED:
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()   # its thread is a daemon: it ends with this process
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        _SHARED.append(MotoServer(url, {
            "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true"}))
    return _SHARED[0]


@pytest.fixture
def moto_server():
    server = _shared()
    try:
        yield MotoServer(server.url, dict(server.env))
    finally:
        # moto's data lives in this process, not in the server: reset it for the next test
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        opener.open(urllib.request.Request(server.url + "/moto-api/reset", method="POST"),
                    timeout=10).read()


def client(server: MotoServer, service: str):
    """A boto3 client on the server, whatever the environment says."""
    import boto3

    return boto3.client(service, endpoint_url=server.url, region_name=REGION,
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def make_bucket(server: MotoServer, name: str) -> None:
    client(server, "s3").create_bucket(Bucket=name)


@pytest.fixture
def aws_env(moto_server, monkeypatch):  # noqa: F811 - the fixture above
    """moto's server, and this process's AWS environment pointing at it (nothing else)."""
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(key, raising=False)
    return moto_server
