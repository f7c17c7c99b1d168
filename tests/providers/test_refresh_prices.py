"""scripts/refresh_prices.py, run as a subprocess: from the clouds' price APIs (recorded replies
in tests/data/price_replies/ served on loopback by a plain http.server) and from SkyPilot's
catalog CSVs."""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "refresh_prices.py"
REPLIES = ROOT / "tests" / "data" / "price_replies"
KEY = "test-api-key-not-printed"


class Replies:
    """Serves the recorded replies; `broken` replaces one file's body."""

    def __init__(self) -> None:
        self.broken: dict[str, bytes] = {}
        self.requests: list[str] = []
        replies = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                replies.requests.append(self.path)
                status, body = replies.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)

    def answer(self, path: str) -> tuple[int, bytes]:
        parts = urlsplit(path)
        query = parse_qs(parts.query)
        if parts.path.startswith("/offers/"):
            file = "aws" + parts.path
        elif parts.path == "/api/retail/prices":
            file = "azure/page2.json" if "$skip" in query else "azure/page1.json"
        elif parts.path == "/v1/services/6F81-5844-456A/skus":
            if query.get("key") != [KEY]:
                return 403, b'{"error": {"code": 403, "message": "API key not valid"}}'
            file = "gcp/page2.json" if query.get("pageToken") else "gcp/page1.json"
        else:
            return 404, b'{"error": "not recorded"}'
        if file in self.broken:
            return 200, self.broken[file]
        if not (REPLIES / file).is_file():
            return 404, b'{"error": "not recorded"}'
        return 200, (REPLIES / file).read_text().replace("{BASE}", self.base).encode()


@pytest.fixture
def replies():
    served = Replies()
    served.thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()
    served.thread.join()


@pytest.fixture
def catalog(tmp_path) -> Path:
    folder = tmp_path / "catalog"
    shutil.copytree(REPLIES / "catalog", folder)
    return folder


def refresh(*args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """No proxy, no AWS credentials (unless given) and no instance-metadata probe."""
    env = {k: v for k, v in os.environ.items()
           if "proxy" not in k.lower() and not k.startswith("AWS_")}
    env.update(GCP_PRICING_API_KEY=KEY, AWS_EC2_METADATA_DISABLED="true",
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull, **extra_env)
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def rows(path: Path) -> list[tuple[str, ...]]:
    return [tuple(row) for row in list(csv.reader(path.open()))[1:]]


def from_apis(replies: Replies, catalog: Path, *args: str,
              **env: str) -> subprocess.CompletedProcess[str]:
    return refresh("--out", str(catalog), "--aws-url", replies.base,
                   "--azure-url", replies.base, "--gcp-url", replies.base, *args, **env)


def test_rebuilds_the_catalog_from_the_price_apis(replies, catalog):
    done = from_apis(replies, catalog)
    assert done.returncode == 0, done.stderr
    # AWS: Linux, shared tenancy, no pre-installed software, used capacity, on-demand terms;
    # spot kept from the catalog (AWS has no spot price list)
    assert rows(catalog / "aws.csv") == [
        ("g5.xlarge", "us-west-2", "usw2-az1", "1.006", "0.3739"),
        ("g5.xlarge", "us-west-2", "usw2-az2", "1.006", "0.357"),
        ("m5.2xlarge", "us-west-2", "usw2-az1", "0.396", "0.1521"),
        ("m5.2xlarge", "us-west-2", "usw2-az2", "0.396", "0.1498")]
    # Azure: both pages; Windows and Low Priority meters skipped
    assert rows(catalog / "azure.csv") == [
        ("Standard_D4s_v5", "eastus", "", "0.2", "0.0211"),
        ("Standard_NC4as_T4_v3", "eastus", "", "0.526", "0.0589")]
    # GCP: 8 vCPUs x core + 30 GiB x RAM; custom and commitment SKUs skipped
    assert rows(catalog / "gcp.csv") == [
        ("n1-standard-8", "us-central1", "us-central1-a",
         f"{8 * 0.031611 + 30 * 0.004237:.6f}", f"{8 * 0.0075 + 30 * 0.001:g}")]
    assert rows(catalog / "gcp-gpus.csv") == [
        ("nvidia-tesla-t4", "1", "us-central1", "us-central1-a", "0.35", "0.125")]
    assert "Source: cloud price APIs" in (catalog / "SOURCE.md").read_text()
    assert "~ aws: m5.2xlarge us-west-2 usw2-az1: on-demand 0.384 -> 0.396" in done.stdout
    assert "~ azure: Standard_D4s_v5 eastus: on-demand 0.192 -> 0.2, spot 0.02112 -> 0.0211" \
        in done.stdout
    assert KEY not in done.stdout + done.stderr + (catalog / "SOURCE.md").read_text()
    assert any("$skip" in path for path in replies.requests)        # followed NextPageLink
    assert any("pageToken=" in path for path in replies.requests)   # followed nextPageToken
    assert "spot figures kept from the previous catalog" in done.stderr   # no AWS credentials


def test_aws_spot_prices_from_the_spot_price_history(replies, catalog, moto_server):
    """moto's EC2 answers DescribeSpotPriceHistory with 0.00001 in every zone that offers the
    type; zone names (us-west-2a) become the zone IDs the catalog keeps (usw2-az2)."""
    done = from_apis(replies, catalog, "--clouds", "aws", "--aws-spot", "history",
                     AWS_ENDPOINT_URL=moto_server, AWS_ACCESS_KEY_ID="testing",
                     AWS_SECRET_ACCESS_KEY="testing")
    assert done.returncode == 0, done.stderr
    found = rows(catalog / "aws.csv")
    zones = {(machine, zone) for machine, _, zone, _, _ in found}
    assert {("g5.xlarge", "usw2-az1"), ("g5.xlarge", "usw2-az2"), ("g5.xlarge", "usw2-az3"),
            ("m5.2xlarge", "usw2-az1"), ("m5.2xlarge", "usw2-az2")} <= zones
    assert {(machine, on_demand, spot) for machine, _, _, on_demand, spot in found} == {
        ("g5.xlarge", "1.006", "0.00001"), ("m5.2xlarge", "0.396", "0.00001")}
    assert "spot from EC2 DescribeSpotPriceHistory" in (catalog / "SOURCE.md").read_text()
    assert rows(catalog / "azure.csv")[0][3] == "0.192"       # other clouds untouched


@pytest.mark.parametrize("file, body, message", [
    ("azure/page1.json", b'{"Items": "none", "NextPageLink": null}',
     "malformed reply: Azure Retail Prices: Items is missing or not a list"),
    ("gcp/page2.json", b"<html>quota exceeded</html>", "the reply is not JSON"),
])
def test_a_malformed_reply_fails_and_leaves_the_catalog_as_it_was(replies, catalog, file, body,
                                                                  message):
    before = {path.name: path.read_bytes() for path in catalog.iterdir()}
    replies.broken[file] = body
    done = from_apis(replies, catalog)
    assert done.returncode == 1
    assert message in done.stderr and "the catalog in" in done.stderr and "is unchanged" in done.stderr
    assert "Traceback" not in done.stderr and KEY not in done.stderr
    assert {path.name: path.read_bytes() for path in catalog.iterdir()} == before


def test_builds_the_catalog_from_skypilot_csvs(tmp_path):
    out = tmp_path / "catalog"
    done = refresh("--from-skypilot-csv", str(ROOT / "tests" / "data" / "skypilot_prices"),
                   "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert rows(out / "aws.csv") == [
        ("g5.xlarge", "us-west-2", "usw2-az1", "1.006", "0.3739"),
        ("g5.xlarge", "us-west-2", "usw2-az2", "1.006", "0.357"),
        ("m6i.large", "us-west-2", "usw2-az4", "0.096", "")]
    assert rows(out / "gcp.csv") == [("n1-standard-8", "us-central1", "us-central1-a", "0.38", "0.0963")]
    assert rows(out / "gcp-gpus.csv") == [
        ("nvidia-tesla-t4", "1", "us-central1", "us-central1-a", "0.35", "0.14")]
    assert rows(out / "azure.csv") == [("Standard_NC4as_T4_v3", "eastus", "", "0.526", "0.062699")]
    source = (out / "SOURCE.md").read_text()
    assert "Source: skypilot-catalog\nRead on: 2026-11-26" in source
