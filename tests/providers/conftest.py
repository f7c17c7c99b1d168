"""Fixtures for preflight: a moto server for AWS and wire-level fakes for GCP and Azure, all on
127.0.0.1, each stopped at the end; credentials given through each SDK's own mechanism."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from tests.processes import stop

from .wire import FakeCloud

os.environ["NO_GCE_CHECK"] = "true"  # before anything imports google.auth (see _loopback_only)

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
GCP_PROJECT = "orchestrate-test"
# A universe domain of its own: google-auth looks up a "regional access boundary" at
# iamcredentials.googleapis.com after each token refresh in the default universe only.
GCP_UNIVERSE = "preflight.test"
AZURE_TENANT = "a1b2c3d4-0000-4000-8000-000000000001"
AZURE_SUBSCRIPTION = "00000000-1111-4222-8333-444444444444"


def _local_opener():
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _is_loopback(host) -> bool:
    import ipaddress

    if host in ("localhost", "", None):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch, tmp_path):
    """No proxy (it would carry loopback requests off the machine); no metadata probes; and any
    attempt of this process to resolve or connect to anything but loopback fails the test."""
    for key in PROXY_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # google-auth compares NO_GCE_CHECK with lowercase "true" (so "True" does nothing), once,
    # when google.auth.compute_engine._metadata is first imported: set it, and where the module
    # was imported before (under another value), give it the value the variable would have.
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    metadata = sys.modules.get("google.auth.compute_engine._metadata")
    if metadata is not None:
        monkeypatch.setattr(metadata, "_NO_GCE_CHECK", True)
    # DefaultAzureCredential narrowed to environment credentials: no managed-identity probe.
    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "EnvironmentCredential")
    for key in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH",
                "AZURE_USERNAME", "AZURE_FEDERATED_TOKEN_FILE", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # no gcloud login is found
    attempts = []
    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.socket.connect

    def getaddrinfo(host, *args, **kwargs):
        if not _is_loopback(host):
            attempts.append(host)
            raise socket.gaierror(f"test guard: no lookups of {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    def connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
            attempts.append(address[0])
            raise OSError(f"test guard: no connections to {address[0]!r}")
        return real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    yield
    assert attempts == [], f"tried to reach non-loopback addresses: {attempts}"


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory):
    """`python -m moto.server` on a free loopback port, for the whole session."""
    from orchestrator.util.waiting import until

    port = _free_port()
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    env = {key: value for key, value in os.environ.items() if key not in PROXY_VARIABLES}
    env["MOTO_IAM_LOAD_MANAGED_POLICIES"] = "true"  # Ray's bootstrap attaches AmazonEC2FullAccess
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            _local_opener().open(url + "/moto-api/", timeout=1).read()
        except OSError:
            return process.poll() is not None  # stop waiting for a server that died
        return True

    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                    "-p", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            if not until(answers, timeout=60, interval=0.2) or process.poll() is not None:
                raise RuntimeError(f"moto server did not start (see {log_path})")
            yield url
        finally:
            stop(process)
        log.close()


_reset_for: list[str] = []   # the test module moto's server was last reset for


@pytest.fixture
def aws(moto_server, monkeypatch, request):
    """boto3 pointed at the moto server with static test credentials.

    The server is shared, and reset when a new test module first uses it: a module starts with
    none of another's key pairs, roles or security groups (a reset makes moto rebuild its EC2
    data, too slow to do for every test). Tests within a module give what they create names of
    their own.
    """
    if _reset_for != [request.module.__name__]:
        _local_opener().open(urllib.request.Request(moto_server + "/moto-api/reset",
                                                    method="POST"), timeout=60).read()
        _reset_for[:] = [request.module.__name__]
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    import boto3

    return boto3.session.Session(region_name="us-west-2")


@pytest.fixture
def fake_cloud(tmp_path, monkeypatch):
    cloud = FakeCloud(tmp_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cloud.cert))
    yield cloud
    cloud.close()


def _service_account_file(folder, token_uri: str):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = folder / "service-account.json"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": GCP_PROJECT, "private_key_id": "0123abcd",
        "private_key": pem, "client_email": f"preflight@{GCP_PROJECT}.iam.gserviceaccount.com",
        "client_id": "100000000000000000001", "token_uri": token_uri,
        "universe_domain": GCP_UNIVERSE,
    }))
    return path


@pytest.fixture
def gcp(fake_cloud, tmp_path, monkeypatch):
    """Application Default Credentials from a service-account key file (a fresh RSA key).

    In a universe other than googleapis.com, google-auth signs a self-signed JWT with the key
    instead of exchanging it at token_uri (which points at the fake all the same).
    """
    key_file = _service_account_file(tmp_path, fake_cloud.url + "/token")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    monkeypatch.setenv("ORCHESTRATE_GCP_ENDPOINT", fake_cloud.url)
    monkeypatch.setenv("GOOGLE_CLOUD_UNIVERSE_DOMAIN", GCP_UNIVERSE)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    return fake_cloud


@pytest.fixture
def azure(fake_cloud, monkeypatch):
    """A service principal from the environment, its authority and ARM both at the fake.

    AZURE_TOKEN_CREDENTIALS=EnvironmentCredential narrows DefaultAzureCredential to that one
    credential: no managed-identity probe of the metadata address, no Azure CLI.
    """
    tenant = f"/{AZURE_TENANT}"
    fake_cloud.route("GET", f"{tenant}/v2.0/.well-known/openid-configuration",
                     fake_cloud.recorded("azure/openid-configuration.json", tenant=AZURE_TENANT))
    fake_cloud.route("POST", f"{tenant}/oauth2/v2.0/token", fake_cloud.recorded("azure/token.json"))
    for key, value in {
        "AZURE_TENANT_ID": AZURE_TENANT, "AZURE_CLIENT_ID": "11111111-2222-4333-8444-555555555555",
        "AZURE_CLIENT_SECRET": "not-a-secret", "AZURE_AUTHORITY_HOST": fake_cloud.url,
        "AZURE_TOKEN_CREDENTIALS": "EnvironmentCredential",
        "ORCHESTRATE_AZURE_ENDPOINT": fake_cloud.url,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    return fake_cloud


@pytest.fixture
def cluster(tmp_path):
    """Write a cluster YAML (dedented) and load it with the real spec loader."""
    from orchestrator.language.cluster import load_cluster

    def make(text: str, name: str = "cluster.yaml", here: bool = True):
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip())
        return load_cluster(path, here=here)

    return make


def by_name(results, name: str) -> list:
    return [r for r in results if r.name == name]


def only(results, name: str):
    found = by_name(results, name)
    assert len(found) == 1, f"expected one {name!r} result, got {found}"
    return found[0]
