"""A fake cloud API at the wire: an HTTPS server on 127.0.0.1 answering with recorded responses.

Google and Azure have no emulator, so the tests point the real SDK clients (their endpoint
settings) at this server: the SDKs build and send real HTTP requests and parse real-shaped JSON
replies, and only the cloud behind them is fake. It speaks TLS because azure-core refuses to
send bearer tokens over plain HTTP and azure-identity requires an https authority; clients
trust its self-signed certificate through REQUESTS_CA_BUNDLE.
"""
from __future__ import annotations

import datetime
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

RECORDED = Path(__file__).parent / "recorded"


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for IP 127.0.0.1 (and localhost), usable as its own CA."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "fake-cloud.pem", folder / "fake-cloud.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class FakeCloud:
    """Routes (METHOD, path) to (status, JSON body), or to a function of the request giving
    them; records every request it receives."""

    def __init__(self, folder: Path) -> None:
        self.cert, key = make_certificate(folder)
        self.routes: dict[tuple[str, str], tuple[int, object]] = {}
        self.requests: list[dict] = []
        self.errors: list[str] = []  # exceptions raised by route functions
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                path = unquote(parts.path)
                request = {"method": self.command, "path": path, "body": body,
                           "query": parse_qs(parts.query),
                           "headers": {k.lower(): v for k, v in self.headers.items()}}
                fake.requests.append(request)
                status, reply = fake.routes.get((self.command, path), (501, {
                    "error": {"code": 501, "message": f"no recorded response for {self.command} {path}"}}))
                if callable(reply):  # chooses a recorded reply from the request
                    try:
                        status, reply = reply(request)
                    except Exception as exc:  # noqa: BLE001 - reported by close()
                        fake.errors.append(f"{self.command} {path}: {exc!r}")
                        status, reply = 500, {"error": {"code": 500, "message": repr(exc)}}
                text = isinstance(reply, str)  # XML (AWS query APIs) is kept as text
                data = reply.encode() if text else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/xml" if text else "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:  # keep test output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        # polled every 0.05 s, not the default 0.5 s: close() (after every test) waits for a poll
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def route(self, method: str, path: str, reply, status: int = 200) -> None:
        self.routes[(method, path)] = (status, reply)

    def recorded(self, name: str, **values) -> object:
        """A recorded response file; `{key}` placeholders (e.g. {base}) are filled in."""
        text = (RECORDED / name).read_text()
        for key, value in {"base": self.url, **values}.items():
            text = text.replace("{" + key + "}", str(value))
        return json.loads(text) if name.endswith(".json") else text

    def paths(self, method: str | None = None) -> list[str]:
        return [r["path"] for r in self.requests if method in (None, r["method"])]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
        assert not self.errors, f"route functions failed: {self.errors}"
