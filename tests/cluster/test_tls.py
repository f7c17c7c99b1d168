"""A cluster's TLS material for Ray's gRPC (issue 29): a CA from the token, a node certificate
for the file's hosts, 0600 files in a 0700 folder beside the token, never in state or the
rendered config. Checked with `cryptography` and with Python's own `ssl` (a real handshake over
a loopback socket: the certificate serves and verifies as Ray's gRPC needs, both ways)."""
from __future__ import annotations

import json
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509

from orchestrator.cluster import tls
from orchestrator.language.cluster import load_cluster
from orchestrator.render.cluster import render_cluster
from orchestrator.state import State, cluster_key
from orchestrator.state.folder import FolderStore
from orchestrator.state.secrets import FileSecrets

HOSTS = ("10.0.0.5", "10.0.0.6")


@pytest.fixture
def state(tmp_path) -> State:
    home = tmp_path / "home"
    state = State(FolderStore(home), FileSecrets(home / "secrets"))
    state.secrets.ensure(cluster_key("c"))
    return state


def load(folder: Path, name: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate((folder / name).read_bytes())


def test_the_node_folder_is_private_and_names_every_host_and_loopback(state):
    folder = tls.ensure(state, "c", HOSTS)
    assert folder == Path(f"{state.secrets.path(cluster_key('c'))}.tls")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert sorted(p.name for p in folder.iterdir()) == ["ca.crt", "env", "node.crt", "node.key"]
    for file in folder.iterdir():
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    node, ca = load(folder, "node.crt"), load(folder, "ca.crt")
    node.verify_directly_issued_by(ca)
    assert {"10.0.0.5", "10.0.0.6", "127.0.0.1", "localhost"} <= set(tls.named(node))
    assert ca.subject.rfc4514_string().startswith("CN=cluster c CA")
    assert "RAY_USE_TLS=1" in (folder / "env").read_text()


def test_the_ca_comes_from_the_token_so_every_machine_signs_alike(state, tmp_path):
    first = tls.ensure(state, "c", HOSTS)
    other = State(FolderStore(tmp_path / "other"), FileSecrets(tmp_path / "other" / "secrets"))
    other.secrets.put(cluster_key("c"), state.secrets.read(cluster_key("c")))
    second = tls.ensure(other, "c", HOSTS)
    # A node certificate made on one machine verifies under the CA certificate of the other.
    load(second, "node.crt").verify_directly_issued_by(load(first, "ca.crt"))
    state.secrets.replace(cluster_key("c"))          # a new token: a new CA
    third = tls.ensure(state, "c", HOSTS)
    with pytest.raises(Exception):  # noqa: B017 - cryptography's InvalidSignature
        load(third, "node.crt").verify_directly_issued_by(load(second, "ca.crt"))


def test_kept_while_current_made_again_when_the_hosts_change(state):
    folder = tls.ensure(state, "c", HOSTS)
    key = (folder / "node.key").read_bytes()
    assert (tls.ensure(state, "c", HOSTS) / "node.key").read_bytes() == key
    tls.ensure(state, "c", (*HOSTS, "10.0.0.7"))
    assert (folder / "node.key").read_bytes() != key
    assert "10.0.0.7" in tls.named(load(folder, "node.crt"))
    (folder / "node.crt").write_text("damaged")
    tls.ensure(state, "c", HOSTS)
    assert "10.0.0.7" not in tls.named(load(folder, "node.crt"))
    tls.forget(state, "c")
    assert not folder.exists() and state.secrets.path(cluster_key("c")).exists()


def test_a_host_name_is_named_with_what_it_resolves_to():
    assert tls.addresses(("localhost",))[:1] == ["localhost"]
    assert "127.0.0.1" in tls.addresses(("localhost",))
    assert tls.addresses(("no-such-host.invalid",))[0] == "no-such-host.invalid"


def test_mutual_tls_handshake_with_the_node_certificate(state):
    """What Ray's gRPC does: the server asks for the client's certificate, the client checks the
    server's address against the certificate; both sides trust only the cluster's CA."""
    folder = tls.ensure(state, "c", HOSTS)
    ca, cert, key = (str(folder / f) for f in ("ca.crt", "node.crt", "node.key"))
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    server_context.load_verify_locations(ca)
    server_context.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[object] = []

    def serve() -> None:
        for _ in range(2):
            connection, _ = listener.accept()
            try:
                with server_context.wrap_socket(connection, server_side=True) as wrapped:
                    seen.append(wrapped.getpeercert()["subject"])
            except (ssl.SSLError, OSError) as exc:
                seen.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    client = ssl.create_default_context(cafile=ca)
    client.load_cert_chain(cert, key)
    with socket.create_connection(("127.0.0.1", port)) as raw, \
            client.wrap_socket(raw, server_hostname="127.0.0.1") as wrapped:
        issuer = dict(pair[0] for pair in wrapped.getpeercert()["issuer"])
        wrapped.send(b"x")
    assert issuer["commonName"] == "cluster c CA"
    stranger = ssl.create_default_context(cafile=ca)   # no client certificate: refused
    with socket.create_connection(("127.0.0.1", port)) as raw, \
            pytest.raises((ssl.SSLError, OSError)), \
            stranger.wrap_socket(raw, server_hostname="127.0.0.1") as wrapped:
        wrapped.send(b"x")
        wrapped.recv(1)
    thread.join(timeout=10)
    listener.close()
    assert isinstance(seen[0], tuple) and isinstance(seen[1], Exception)


def test_up_renders_paths_only_and_state_holds_no_key(state, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("cluster_name: c\nprovider: {type: local, head_ip: 10.0.0.5, "
                    "worker_ips: [10.0.0.6]}\nauth: {ssh_user: ray, ssh_private_key: k}\n")
    token_file = state.secrets.path(cluster_key("c"))
    rendered = render_cluster(load_cluster(path, here=False), token_file=str(token_file))
    folder = tls.ensure(state, "c", ("10.0.0.5", "10.0.0.6"))
    assert rendered.config["file_mounts"]["~/.ray/tls"] == str(folder)
    state.store.write_rendered("c", rendered.config)
    written = json.dumps(rendered.config) + state.store.rendered_path("c").read_text()
    key = (folder / "node.key").read_text().strip().splitlines()[1]
    assert "PRIVATE KEY" not in written and key not in written
    state_files = [p for p in (tmp_path / "home").rglob("*")
                   if p.is_file() and "secrets" not in p.relative_to(tmp_path / "home").parts]
    assert state_files and not any("PRIVATE KEY" in p.read_text() for p in state_files)
