"""A cluster's TLS for Ray's gRPC between its nodes (RAY_USE_TLS): its CA, and the certificate
and key every node serves and connects with.

    ensure(state, name, names) -> Path    the node folder `ray up` copies to ~/.ray/tls
    forget(state, name)                   at `down`

The CA's private key is derived from the cluster's token (HKDF-SHA256, the cluster's name as
salt), never written anywhere: every machine holding the token (a project's CI runner too)
signs with the same CA, so a certificate made on one machine is trusted by nodes started from
another, and nothing beyond the token needs keeping or sharing. Whoever holds the token already
commands the cluster.

Ray's gRPC (C++ and Python alike) checks the server's address against its certificate and asks
the client for one (mutual TLS, `ray/_common/tls_utils.py`): the node certificate names every
host the file gives, what each name resolves to here, 127.0.0.1 and localhost, and serves as
server and client. One certificate and key for every node, since `ray up` copies the same
file_mounts to each. Files are 0600 in a 0700 folder beside the token (`render.harden.tls_folder`);
only their paths enter the rendered config.
"""
from __future__ import annotations

import datetime
import ipaddress
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import require
from ..render.harden import AUTH_ENV, TLS_CA, TLS_CERT, TLS_ENV, TLS_ENV_FILE, TLS_KEY, tls_folder
from ..state import State, cluster_key

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

LOOPBACK = ("127.0.0.1", "localhost")
# `source ~/.ray/tls/env` in a shell on a node, for Ray's own commands (`ray status`).
ENV_TEXT = AUTH_ENV + TLS_ENV.rstrip("; ") + "\n"
VALID_DAYS = 3650          # a cluster's life; `up` makes new ones once fewer than 30 days are left
RENEW_DAYS = 30
# The order of P-256's group: the derived scalar must lie in [1, n-1].
_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def folder_of(state: State, name: str) -> Path:
    return Path(tls_folder(str(state.secrets.path(cluster_key(name)))))


def addresses(names: tuple[str, ...]) -> list[str]:
    """What the node certificate names: each host, what a host name resolves to here (Ray's
    nodes dial each other by address), and loopback."""
    found: list[str] = []
    for name in (*names, *LOOPBACK):
        ip = _ip(name)
        found.append(str(ip) if ip is not None else name)
        if ip is None:
            try:
                infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
            except (OSError, UnicodeError):
                continue   # a name that does not resolve here is named as it is
            found += [str(info[4][0]).split("%")[0] for info in infos]
    return list(dict.fromkeys(found))


def ensure(state: State, name: str, names: tuple[str, ...]) -> Path:
    """The node folder of cluster `name` (ca.crt, node.crt, node.key, env), made or made again
    when its certificate does not name `names` or was not signed by the token's CA."""
    require("cryptography", "cryptography", "ray")
    key = cluster_key(name)
    folder = folder_of(state, name)
    wanted = addresses(names)
    ca_key = _ca_key(state.secrets.read(key), name)
    if _current(folder, ca_key, wanted):
        return folder
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ca = _ca_cert(ca_key, name)
    node_key = ec.generate_private_key(ec.SECP256R1())
    node = _node_cert(node_key, ca, ca_key, wanted)
    pem = serialization.Encoding.PEM
    files = {
        TLS_KEY: node_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()).decode(),
        TLS_CERT: node.public_bytes(pem).decode(),
        TLS_CA: ca.public_bytes(pem).decode(),
        TLS_ENV_FILE: ENV_TEXT,
    }
    for file, text in files.items():   # 0600 each, the folder 0700 (SecretStore.put)
        state.secrets.put(f"{key}.tls/{file}", text)
    return folder


def forget(state: State, name: str) -> None:
    shutil.rmtree(folder_of(state, name), ignore_errors=True)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _ca_key(token: str, name: str) -> ec.EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    seed = HKDF(algorithm=hashes.SHA256(), length=48, salt=name.encode(),
                info=b"orchestrate: the CA of a cluster's Ray gRPC TLS, v1").derive(token.encode())
    return ec.derive_private_key(int.from_bytes(seed, "big") % (_P256_ORDER - 1) + 1,
                                 ec.SECP256R1())


def _subject(common_name: str) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "orchestrate"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def ca_subject(name: str) -> str:
    return f"cluster {name} CA"


def _window() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.timezone.utc)
    return now - datetime.timedelta(hours=1), now + datetime.timedelta(days=VALID_DAYS)


def _ca_cert(ca_key: ec.EllipticCurvePrivateKey, name: str) -> x509.Certificate:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    subject = _subject(ca_subject(name))
    start, end = _window()
    usage = x509.KeyUsage(digital_signature=False, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          key_cert_sign=True, crl_sign=True, encipher_only=False,
                          decipher_only=False)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(usage, critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))


def _node_cert(node_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate,
               ca_key: ec.EllipticCurvePrivateKey, wanted: list[str]) -> x509.Certificate:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    names: list[x509.GeneralName] = []
    for entry in wanted:
        ip = _ip(entry)
        names.append(x509.IPAddress(ip) if ip is not None else x509.DNSName(entry))
    start, end = _window()
    return (x509.CertificateBuilder().subject_name(_subject("ray node"))
            .issuer_name(ca.subject).public_key(node_key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))


def named(cert: x509.Certificate) -> list[str]:
    """The addresses and host names a certificate names, as `addresses` writes them."""
    from cryptography import x509

    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] + \
        list(sans.get_values_for_type(x509.DNSName))


def _current(folder: Path, ca_key: ec.EllipticCurvePrivateKey, wanted: list[str]) -> bool:
    """Whether the folder's files are whole, signed by the token's CA, name exactly `wanted`
    and stay valid for another RENEW_DAYS."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization

    try:
        ca = x509.load_pem_x509_certificate((folder / TLS_CA).read_bytes())
        node = x509.load_pem_x509_certificate((folder / TLS_CERT).read_bytes())
        key = serialization.load_pem_private_key((folder / TLS_KEY).read_bytes(), None)
        if (folder / TLS_ENV_FILE).read_text() != ENV_TEXT:
            return False
        node.verify_directly_issued_by(ca)
    except (OSError, ValueError, TypeError, InvalidSignature):
        return False
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if ca.public_key().public_bytes(der, spki) != ca_key.public_key().public_bytes(der, spki) \
            or key.public_key().public_bytes(der, spki) != node.public_key().public_bytes(der, spki):
        return False
    left = node.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc)
    return sorted(named(node)) == sorted(wanted) and left > datetime.timedelta(days=RENEW_DAYS)

