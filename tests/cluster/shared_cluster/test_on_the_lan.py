"""Issue 29, point 4: an on-prem cluster's token never crosses the LAN in clear. The job API
binds the head's loopback (reached through the SSH forward only), Ray's gRPC between the hosts
runs with TLS from the cluster's own CA, and the keys stay private and out of state."""
from __future__ import annotations

import socket
import ssl
import stat

import pytest

pytestmark = [pytest.mark.ssh, pytest.mark.ray, pytest.mark.xdist_group("shared_cluster")]

GCS_PORT = 6379   # Ray's default head start command: --port=6379
# What a plain (cleartext) gRPC client sends first: HTTP/2's preface and an empty SETTINGS frame.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def tls_folder(ssh_cluster):
    return ssh_cluster.home / "secrets" / "clusters" / f"{ssh_cluster.name}.tls"


def test_the_job_api_answers_only_through_the_ssh_forward(ssh_cluster):
    from orchestrator.util import http

    record = ssh_cluster.record()
    assert record["dashboard_host"] == "127.0.0.1" and record["address"] is None
    head = ssh_cluster.machine.hosts[0]
    # Before issue 29 the dashboard listened on the head's address: this connection was taken.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((head.ip, record["dashboard_port"]), timeout=10).close()
    with ssh_cluster.open() as endpoint:
        assert endpoint.via == "ssh-forward" and endpoint.address.startswith("http://127.0.0.1:")
        assert http.get_json(endpoint.address, "/api/version", endpoint.token, timeout=10)


def test_rays_gcs_port_speaks_tls_with_a_certificate_from_the_clusters_ca(ssh_cluster):
    folder = tls_folder(ssh_cluster)
    head = ssh_cluster.machine.hosts[0]
    # A cleartext gRPC client gets no HTTP/2 answer: the server wants a TLS ClientHello.
    with socket.create_connection((head.ip, GCS_PORT), timeout=10) as plain:
        plain.sendall(H2_PREFACE)
        answer = plain.recv(64)
    assert answer[3:4] != b"\x04", f"a cleartext HTTP/2 SETTINGS frame came back: {answer!r}"
    # Holding the cluster's node certificate (Ray asks the client for one): the handshake
    # verifies the head's address against the server's certificate, issued by the cluster's CA.
    context = ssl.create_default_context(cafile=str(folder / "ca.crt"))
    context.load_cert_chain(str(folder / "node.crt"), str(folder / "node.key"))
    with socket.create_connection((head.ip, GCS_PORT), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=head.ip) as wrapped:
        certificate = wrapped.getpeercert()
    issuer = dict(pair[0] for pair in certificate["issuer"])
    assert issuer["commonName"] == f"cluster {ssh_cluster.name} CA"
    assert ("IP Address", head.ip) in certificate["subjectAltName"]
    # A TLS client without a certificate of the cluster's CA is refused (mutual TLS).
    stranger = ssl.create_default_context(cafile=str(folder / "ca.crt"))
    with socket.create_connection((head.ip, GCS_PORT), timeout=10) as raw, \
            pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)), \
            stranger.wrap_socket(raw, server_hostname=head.ip) as wrapped:
        wrapped.sendall(H2_PREFACE)
        if not wrapped.recv(64):   # TLS 1.3: the refusal arrives after the handshake
            raise ConnectionResetError("closed")


def test_tls_keys_are_private_here_and_on_every_host_and_never_in_state(ssh_cluster):
    folder = tls_folder(ssh_cluster)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == \
        {"ca.crt": 0o600, "node.crt": 0o600, "node.key": 0o600, "env": 0o600}
    for host in ssh_cluster.machine.hosts:
        modes = host.in_host("stat", "-c", "%a %n", "/root/.ray/tls", "/root/.ray/tls/node.key")
        assert modes.stdout.split("\n")[:2] == ["700 /root/.ray/tls", "600 /root/.ray/tls/node.key"]
    key_line = (folder / "node.key").read_text().splitlines()[1]
    state_files = [p for p in (ssh_cluster.home / "clusters").rglob("*") if p.is_file()]
    rendered = ssh_cluster.cli("render", str(ssh_cluster.file))
    assert rendered.returncode == 0, rendered.stderr
    assert state_files and "~/.ray/tls" in rendered.stdout
    for text in [p.read_text(errors="replace") for p in state_files] + [rendered.stdout]:
        assert "PRIVATE KEY" not in text and key_line not in text


def test_ray_status_on_the_head_with_the_tls_env_file(ssh_cluster):
    done = ssh_cluster.cli("exec", ssh_cluster.name, "--", "source ~/.ray/tls/env && ray status")
    assert done.returncode == 0, done.stderr
    assert "Active:" in done.stdout
