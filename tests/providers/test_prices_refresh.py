"""`orchestrate prices refresh`: SkyPilot's full public catalog fetched, converted and cached
under ORCHESTRATE_HOME; the prices then read from it, the shipped subset when there is none.

Recorded replies (tests/data/skypilot_catalog/, a few real rows of SkyPilot's vms.csv files, as
its SOURCE.md says) are served on loopback by a plain http.server; nothing here reaches a
network, and nothing but `prices refresh` asks the server for anything."""
from __future__ import annotations

import json
import os
import stat
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.providers import prices
from orchestrator.providers.cost import cluster_price

ROOT = Path(__file__).resolve().parents[2]
REPLIES = ROOT / "tests" / "data" / "skypilot_catalog"
FULL = "full catalog cached by `orchestrate prices refresh`"
SHIPPED = "the subset shipped with orchestrate"
CUT = -1


class Catalog:
    """Serves REPLIES by path (/v8/aws/vms.csv); `broken` replaces a path's reply."""

    def __init__(self) -> None:
        self.broken: dict[str, tuple[int, bytes]] = {}
        self.requests: list[str] = []
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                served.requests.append(self.path)
                status, body = served.answer(self.path)
                cut = status == CUT           # a reply that ends before its Content-Length
                self.send_response(200 if cut else status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body) + (100 if cut else 0)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/catalogs"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)

    def answer(self, path: str) -> tuple[int, bytes]:
        if path in self.broken:
            return self.broken[path]
        file = REPLIES / path.removeprefix("/catalogs/")
        if not path.startswith("/catalogs/") or ".." in path or not file.is_file():
            return 404, b"404: Not Found"
        return 200, file.read_bytes()


@pytest.fixture
def catalog(monkeypatch):
    monkeypatch.delenv("ORCHESTRATE_PRICES_CATALOG_URL", raising=False)
    served = Catalog()
    served.thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()
    served.thread.join()


def refresh(catalog: Catalog, *args: str) -> int:
    return main(["prices", "refresh", "--catalog-url", catalog.base, *args])


def cache() -> Path:
    return Path(os.environ["ORCHESTRATE_HOME"]) / "prices"


def snapshot() -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(cache().iterdir())}


def aws_cluster(instance: str = "m5.large", region: str = "us-east-2") -> dict:
    """A Ray config as `up` and `status` price it: an on-demand head, spot workers."""
    return {"cluster_name": "c", "max_workers": 2,
            "provider": {"type": "aws", "region": region},
            "head_node_type": "head",
            "available_node_types": {
                "head": {"node_config": {"InstanceType": instance}},
                "cpu": {"min_workers": 0, "max_workers": 2, "node_config": {
                    "InstanceType": instance, "InstanceMarketOptions": {"MarketType": "spot"}}}}}


def test_m5_large_in_us_east_2_has_a_price_after_prices_refresh(catalog, capsys):
    before = cluster_price(aws_cluster())
    assert before.nodes["head"].hourly is None
    assert [w for w in before.warnings if ".head." in w] == [
        "available_node_types.head.node_config.InstanceType: m5.large in us-east-2 is not in "
        "the price catalog; its price is unknown (the shipped catalog is a subset: "
        "`orchestrate prices refresh` fetches the full one)"]
    assert SHIPPED in before.source
    assert catalog.requests == []                  # pricing never fetches

    assert refresh(catalog) == 0
    price = cluster_price(aws_cluster())
    assert price.nodes["head"].hourly == 0.096
    assert price.nodes["cpu"].hourly == 0.038       # spot: the region's highest zone
    assert prices.lookup("aws", "m5.large", "us-east-2", "use2-az3", spot=True) == 0.0304
    assert price.at_max == pytest.approx(0.096 + 2 * 0.038)
    assert price.warnings == ()
    today = datetime.now(timezone.utc).date().isoformat()
    assert price.source == f"list prices of {today} (skypilot-catalog, {FULL})"
    out = capsys.readouterr().out
    aws = next(line for line in out.splitlines() if line.startswith("aws "))
    assert aws.split()[1] == "8" and aws.endswith(f"{catalog.base}/v8/aws/vms.csv")


def test_the_cache_is_private_and_records_where_and_when(catalog, capsys):
    assert refresh(catalog, "--format", "json") == 0
    report = json.loads(capsys.readouterr().out)
    folder = cache()
    assert report["folder"] == str(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert sorted(p.name for p in folder.iterdir()) == [
        "about.json", "aws.csv", "azure.csv", "gcp-gpus.csv", "gcp.csv"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in folder.iterdir())
    about = json.loads((folder / "about.json").read_text())
    clouds = {c["cloud"]: c for c in report["clouds"]}
    for cloud in ("aws", "gcp", "azure"):
        assert about["clouds"][cloud]["url"] == clouds[cloud]["url"]
        datetime.fromisoformat(about["clouds"][cloud]["fetched_at"])
    assert clouds["aws"]["url"] == f"{catalog.base}/v8/aws/vms.csv"
    # No v8 (nor v7) Azure file: the newest version that has one, said so.
    assert clouds["azure"]["url"] == f"{catalog.base}/v6/azure/vms.csv"
    assert f"{catalog.base}/v8/azure/vms.csv" in clouds["azure"]["note"]
    assert prices.source("azure").startswith("list prices of ")
    assert "skypilot-catalog v6" in prices.source("azure")
    assert prices.lookup("azure", "Standard_NC4as_T4_v3", "eastus", spot=True) == 0.062699
    # GCP: GPU rows become gcp-gpus.csv; TPUs and a3 hosts (priced without their GPUs) are not
    # priced; a machine type outside the shipped regions is.
    assert prices.accelerator("gcp", "nvidia-tesla-t4", 1, "us-central1", "us-central1-a") == 0.35
    assert prices.lookup("gcp", "a2-highgpu-1g", "us-east1") == 0.73948
    assert prices.lookup("gcp", "a3-highgpu-1g", "us-central1") is None
    assert "tpu-v6e-1" not in (folder / "gcp-gpus.csv").read_text()
    assert clouds["gcp"]["rows"] == 3 and clouds["gcp"]["skipped"] == 2


@pytest.mark.parametrize("body, reason", [
    (b"<html><body>rate limited</body></html>", "no column 'InstanceType'"),
    (b"InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,"
     b"Region,AvailabilityZone\nm5.large,,,2.0,8.0,,cheap,0.03,us-east-2,use2-az1\n",
     "line 2: not a price: 'cheap'"),
    (b"InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,"
     b"Region,AvailabilityZone\n", "no rows"),
])
def test_a_malformed_reply_exits_1_and_leaves_the_cache_as_it_was(catalog, capsys, body,
                                                                  reason):
    assert refresh(catalog) == 0
    kept = snapshot()
    capsys.readouterr()
    catalog.broken["/catalogs/v8/aws/vms.csv"] = (200, body)
    assert refresh(catalog) == 1
    err = capsys.readouterr().err
    assert f"ERROR the aws price catalog ({catalog.base}/v8/aws/vms.csv)" in err
    assert reason in err and "nothing was written" in err
    assert "Traceback" not in err
    assert snapshot() == kept


def test_a_reply_cut_short_exits_1_and_leaves_the_cache_as_it_was(catalog, capsys):
    assert refresh(catalog) == 0
    kept = snapshot()
    capsys.readouterr()
    catalog.broken["/catalogs/v8/gcp/vms.csv"] = (CUT, b"InstanceType,vCPUs,Mem")
    assert refresh(catalog) == 1
    err = capsys.readouterr().err
    assert "ERROR the gcp price catalog" in err and "cut short (22 of 122 bytes)" in err
    assert "Traceback" not in err
    assert snapshot() == kept


def test_github_s_rate_limit_sends_the_default_address_to_skypilot_s_mirror(catalog,
                                                                           monkeypatch):
    from orchestrator.providers import price_cache

    monkeypatch.setattr(price_cache, "HOSTED", catalog.base.replace("/catalogs", "/github"))
    monkeypatch.setattr(price_cache, "MIRROR", catalog.base)
    catalog.broken["/github/v8/aws/vms.csv"] = (429, b"429: Too Many Requests")
    assert main(["prices", "refresh", "--clouds", "aws"]) == 0
    assert catalog.requests == ["/github/v8/aws/vms.csv", "/catalogs/v8/aws/vms.csv"]
    assert price_cache.cached()["aws"].url == f"{catalog.base}/v8/aws/vms.csv"
    # a rate limit at an address of one's own is an error, not a detour
    catalog.broken["/catalogs/v8/aws/vms.csv"] = (429, b"429: Too Many Requests")
    assert refresh(catalog, "--clouds", "aws") == 1


def test_a_404_exits_1_and_leaves_the_cache_as_it_was(catalog, capsys):
    assert refresh(catalog) == 0
    kept = snapshot()
    for version in ("v8", "v7", "v6"):
        catalog.broken[f"/catalogs/{version}/gcp/vms.csv"] = (404, b"404: Not Found")
    assert refresh(catalog) == 1
    err = capsys.readouterr().err
    assert "ERROR the gcp price catalog" in err and "HTTP 404" in err
    assert "Traceback" not in err
    assert snapshot() == kept
    assert prices.lookup("gcp", "a2-highgpu-1g", "us-east1") == 0.73948


def test_no_answer_at_all_exits_1_and_the_shipped_subset_is_used(catalog, capsys):
    catalog.server.shutdown()
    catalog.server.server_close()
    assert refresh(catalog, "--timeout", "5") == 1
    err = capsys.readouterr().err
    assert "ERROR the aws price catalog" in err and "Traceback" not in err
    assert not cache().exists()
    assert prices.lookup("aws", "m5.large", "us-east-2") is None
    assert prices.lookup("aws", "m5.2xlarge", "us-west-2") == 0.384       # the shipped row
    assert prices.source("aws") == (
        "list prices of 2026-11-26 (skypilot-catalog, the subset shipped with orchestrate: "
        "3 regions; `orchestrate prices refresh` fetches all)")


def test_a_cache_older_than_a_week_is_used_and_says_so(catalog):
    assert refresh(catalog) == 0
    about_file = cache() / "about.json"
    about = json.loads(about_file.read_text())
    old = datetime.now(timezone.utc) - timedelta(days=10)
    about["clouds"]["aws"]["fetched_at"] = old.isoformat()
    about_file.write_text(json.dumps(about))
    assert prices.lookup("aws", "m5.large", "us-east-2") == 0.096
    assert prices.source("aws") == (
        f"list prices of {old.date().isoformat()} (skypilot-catalog, {FULL}; 10 days old: "
        "`orchestrate prices refresh` updates it)")
    assert prices.source("gcp").endswith(f", {FULL})")


def test_refreshing_one_cloud_keeps_the_others(catalog):
    assert refresh(catalog, "--clouds", "gcp") == 0
    assert sorted(p.name for p in cache().iterdir()) == ["about.json", "gcp-gpus.csv", "gcp.csv"]
    assert SHIPPED in prices.source("aws") and FULL in prices.source("gcp")
    assert refresh(catalog, "--clouds", "aws") == 0
    assert FULL in prices.source("aws") and FULL in prices.source("gcp")
    assert SHIPPED in prices.source("azure")
    assert all("/azure/" not in path for path in catalog.requests)


def test_the_url_comes_from_the_environment_when_not_given(catalog, monkeypatch, capsys):
    monkeypatch.setenv("ORCHESTRATE_PRICES_CATALOG_URL", catalog.base + "/")
    assert main(["prices", "refresh", "--clouds", "aws"]) == 0
    assert catalog.requests == ["/catalogs/v8/aws/vms.csv"]
    # ... and pricing never reads it: no request without `prices refresh`
    cluster_price(aws_cluster("g5.xlarge", "us-west-2"))
    assert catalog.requests == ["/catalogs/v8/aws/vms.csv"]


def test_a_damaged_cache_falls_back_to_the_shipped_subset(catalog):
    assert refresh(catalog) == 0
    (cache() / "about.json").write_text("{not json")
    assert prices.lookup("aws", "m5.large", "us-east-2") is None
    assert SHIPPED in prices.source("aws")
    assert refresh(catalog) == 0                   # and a refresh replaces it
    assert prices.lookup("aws", "m5.large", "us-east-2") == 0.096


def test_an_unknown_cloud_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["prices", "refresh", "--clouds", "aws,kuberay"])
    assert exit_.value.code == 2
    assert "kuberay" in capsys.readouterr().err
