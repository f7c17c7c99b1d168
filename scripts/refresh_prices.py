"""Rebuild the price catalog shipped in the package (orchestrator/providers/catalog/).

    python scripts/refresh_prices.py --from-skypilot-csv ../shared/data/prices
        from the trimmed SkyPilot catalog CSVs (aws.csv, gcp.csv, azure.csv; their SOURCE.md)
    python scripts/refresh_prices.py [--clouds aws,azure,gcp] [--types T,..] [--regions R,..]
        from the clouds' public price APIs (network access needed): the AWS Price List bulk
        offer files, Azure Retail Prices, Google Cloud Billing Catalog (GCP needs an API key in
        GCP_PRICING_API_KEY or --gcp-key-file; it is never printed). Only the instance types and
        regions the current catalog lists, unless given.

Base URLs: --aws-url, --azure-url, --gcp-url (or ORCHESTRATE_PRICES_{AWS,AZURE,GCP}_URL), so a
test can serve recorded replies on loopback. Every reply is read and checked before any file is
written; the files are then replaced atomically. A malformed or failed reply exits 1 with the
reason and leaves the catalog as it was. Standard library only.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orchestrator.providers import skypilot_catalog  # noqa: E402 (after the path is set)
from orchestrator.providers.skypilot_catalog import fmt, render  # noqa: E402

CATALOG = Path(__file__).resolve().parent.parent / "orchestrator" / "providers" / "catalog"
FILES = {"aws": "aws.csv", "gcp": "gcp.csv", "gcp-gpus": "gcp-gpus.csv", "azure": "azure.csv"}
DEFAULT_URLS = {
    "aws": "https://pricing.us-east-1.amazonaws.com",
    "azure": "https://prices.azure.com",
    "gcp": "https://cloudbilling.googleapis.com",
}
GCP_COMPUTE_SERVICE = "6F81-5844-456A"
# GCP's accelerator types and the Billing Catalog's SKU descriptions ("Nvidia Tesla T4 GPU
# running in Americas").
GCP_GPU_SKUS = {"nvidia-tesla-a100": "Nvidia Tesla A100", "nvidia-a100-80gb": "Nvidia A100 80GB",
                "nvidia-h100-80gb": "Nvidia H100 80GB", "nvidia-l4": "Nvidia L4",
                "nvidia-tesla-t4": "Nvidia Tesla T4", "nvidia-tesla-v100": "Nvidia Tesla V100",
                "nvidia-tesla-p100": "Nvidia Tesla P100", "nvidia-tesla-p4": "Nvidia Tesla P4"}
Rows = list[tuple[str, ...]]


class Failed(Exception):
    """A reply or input the catalog cannot be built from; the message says which and why."""


# --- from SkyPilot's catalog CSVs (the conversion `orchestrate prices refresh` runs too) ---

def from_skypilot(folder: Path) -> dict[str, Rows]:
    tables: dict[str, Rows] = {"aws": [], "gcp": [], "gcp-gpus": [], "azure": []}
    for cloud in skypilot_catalog.CLOUDS:
        path = folder / f"{cloud}.csv"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise Failed(f"{path}: {exc.strerror or exc}") from None
        try:
            tables.update(skypilot_catalog.convert(cloud, text, str(path)).tables)
        except skypilot_catalog.Malformed as exc:
            raise Failed(str(exc)) from None
    return tables


# --- from the clouds' price APIs ---

def fetch_json(url: str) -> Any:
    shown = re.sub(r"key=[^&]+", "key=***", url)
    try:
        with urllib.request.urlopen(url, timeout=60) as reply:  # noqa: S310 (http(s) URLs only)
            body = reply.read()
    except urllib.error.HTTPError as exc:
        raise Failed(f"{shown}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Failed(f"{shown}: {getattr(exc, 'reason', exc)}") from None
    try:
        return json.loads(body)
    except ValueError:
        raise Failed(f"{shown}: the reply is not JSON") from None


def _need(value: Any, kind: type, what: str) -> Any:
    if not isinstance(value, kind):
        raise Failed(f"malformed reply: {what} is missing or not a {kind.__name__}")
    return value


def aws_spot_history(wanted: dict[str, set[str]], required: bool) -> dict[tuple[str, str, str], float] | None:
    """The current Linux spot price per (instance type, region, zone ID) from EC2
    DescribeSpotPriceHistory (boto3, the usual credentials; AWS_ENDPOINT_URL honoured), or None
    when boto3 or credentials are missing and `required` is False. Zone names differ per
    account; zone IDs (usw2-az1), which the catalog keeps, do not."""
    try:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        if required:
            raise Failed("--aws-spot history needs boto3 (pip install boto3)") from None
        return None
    session = boto3.session.Session()
    if session.get_credentials() is None:
        if required:
            raise Failed("--aws-spot history needs AWS credentials") from None
        return None
    newest: dict[tuple[str, str, str], tuple[Any, float]] = {}
    for region in sorted(wanted):
        try:
            ec2 = session.client("ec2", region_name=region)
            ids = {zone["ZoneName"]: zone["ZoneId"]
                   for zone in ec2.describe_availability_zones()["AvailabilityZones"]}
            pages = ec2.get_paginator("describe_spot_price_history").paginate(
                InstanceTypes=sorted(wanted[region]), ProductDescriptions=["Linux/UNIX"],
                StartTime=datetime.now(timezone.utc))
            for page in pages:
                for item in page.get("SpotPriceHistory") or []:
                    if not str(item.get("ProductDescription", "")).startswith("Linux/UNIX"):
                        continue
                    zone = ids.get(item["AvailabilityZone"], item["AvailabilityZone"])
                    key = (item["InstanceType"], region, zone)
                    entry = (item.get("Timestamp"), float(item["SpotPrice"]))
                    if key not in newest or str(entry[0]) > str(newest[key][0]):
                        newest[key] = entry
        except (BotoCoreError, ClientError) as exc:
            raise Failed(f"EC2 DescribeSpotPriceHistory in {region}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise Failed(f"malformed reply: EC2 DescribeSpotPriceHistory in {region}: {exc!r}") from None
    return {key: price for key, (_, price) in newest.items()}


def aws_prices(base: str, wanted: dict[str, set[str]], old: Rows,
               history: dict[tuple[str, str, str], float] | None) -> Rows:
    """On-demand from the bulk offer file of each region (Linux, Shared tenancy, no
    pre-installed software, capacity used). AWS publishes no spot price list: spot comes from
    `history` (DescribeSpotPriceHistory) when given, else is kept from the current catalog."""
    index = fetch_json(f"{base}/offers/v1.0/aws/AmazonEC2/current/region_index.json")
    regions = _need(index.get("regions") if isinstance(index, dict) else None, dict,
                    "region_index.json: regions")
    spots = {(row[0], row[1], row[2]): row[4] for row in old}
    zones: dict[tuple[str, str], list[str]] = {}
    for row in old:
        zones.setdefault((row[0], row[1]), []).append(row[2])
    if history is not None:
        spots = {key: fmt(price) for key, price in history.items()}
        for machine, region, zone in history:
            if zone not in zones.setdefault((machine, region), []):
                zones[(machine, region)].append(zone)
    rows: Rows = []
    for region in sorted(wanted):
        entry = _need(regions.get(region), dict, f"region_index.json: regions.{region}")
        path = _need(entry.get("currentVersionUrl"), str, f"regions.{region}.currentVersionUrl")
        offer = fetch_json(urllib.parse.urljoin(base + "/", path))
        products = _need(offer.get("products") if isinstance(offer, dict) else None, dict,
                         f"{region} offer file: products")
        terms = _need((offer.get("terms") or {}).get("OnDemand"), dict,
                      f"{region} offer file: terms.OnDemand")
        for sku, product in products.items():
            attrs = product.get("attributes") or {}
            machine = attrs.get("instanceType")
            if machine not in wanted[region] or not (
                    attrs.get("operatingSystem") == "Linux" and attrs.get("tenancy") == "Shared"
                    and attrs.get("preInstalledSw") == "NA"
                    and attrs.get("capacitystatus", "Used") == "Used"):
                continue
            price = _aws_on_demand(terms.get(sku), f"{region} {machine} ({sku})")
            for zone in zones.get((machine, region)) or [""]:
                if zone or history is None:   # a zone-less row only where no zone is known
                    rows.append((machine, region, zone, fmt(price),
                                 spots.get((machine, region, zone), "")))
    return rows


def _aws_on_demand(term: Any, what: str) -> float:
    for offer in _need(term, dict, f"terms.OnDemand of {what}").values():
        for dimension in (offer.get("priceDimensions") or {}).values():
            if dimension.get("unit") == "Hrs":
                usd = (dimension.get("pricePerUnit") or {}).get("USD")
                try:
                    return float(usd)
                except (TypeError, ValueError):
                    raise Failed(f"malformed reply: {what}: pricePerUnit.USD is {usd!r}") from None
    raise Failed(f"malformed reply: {what}: no hourly on-demand price")


def azure_prices(base: str, wanted: dict[str, set[str]]) -> Rows:
    """Consumption prices per VM size and region; spot rows carry "Spot" in skuName/meterName;
    Windows and Low Priority rows are skipped."""
    rows: Rows = []
    for region in sorted(wanted):
        sizes = " or ".join(f"armSkuName eq '{size}'" for size in sorted(wanted[region]))
        query = (f"serviceName eq 'Virtual Machines' and priceType eq 'Consumption' "
                 f"and armRegionName eq '{region}' and ({sizes})")
        url: str | None = f"{base}/api/retail/prices?" + urllib.parse.urlencode({"$filter": query})
        found: dict[str, dict[str, float]] = {}
        while url:
            page = fetch_json(url)
            items = _need(page.get("Items") if isinstance(page, dict) else None, list,
                          "Azure Retail Prices: Items")
            for item in items:
                size, name = item.get("armSkuName"), f"{item.get('skuName')} {item.get('meterName')}"
                if size not in wanted[region] or "Windows" in str(item.get("productName")) \
                        or "Low Priority" in name or item.get("unitOfMeasure") != "1 Hour":
                    continue
                price = item.get("retailPrice")
                if not isinstance(price, (int, float)):
                    raise Failed(f"malformed reply: {size} in {region}: retailPrice is {price!r}")
                found.setdefault(size, {})["spot" if "Spot" in name else "on_demand"] = float(price)
            url = page.get("NextPageLink") or None
        for size, prices in sorted(found.items()):
            rows.append((size, region, "", fmt(prices.get("on_demand")), fmt(prices.get("spot"))))
    return rows


# vCPUs and GiB of memory of GCP's predefined machine types, by family.
def gcp_shape(machine: str) -> tuple[str, float, float] | None:
    match = re.fullmatch(r"(n1|n2|e2|g2)-standard-(\d+)|a2-highgpu-(\d+)g", machine)
    if not match:
        return None
    if match.group(3):
        gpus = int(match.group(3))
        return "A2", 12.0 * gpus, 85.0 * gpus
    family, cpus = match.group(1), int(match.group(2))
    return family.upper(), float(cpus), cpus * (3.75 if family == "n1" else 4.0)


def _gcp_unit_price(sku: dict[str, Any]) -> float:
    try:
        rates = sku["pricingInfo"][0]["pricingExpression"]["tieredRates"]
        money = rates[-1]["unitPrice"]
        return int(money.get("units") or 0) + int(money.get("nanos") or 0) / 1e9
    except (KeyError, IndexError, TypeError, ValueError):
        raise Failed(f"malformed reply: SKU {sku.get('skuId')!r} has no unit price") from None


def gcp_prices(base: str, key: str, machines: dict[str, set[str]],
               gpus: dict[str, set[tuple[str, int]]], zones: dict[tuple[str, str], list[str]]
               ) -> tuple[Rows, Rows]:
    """Machine = vCPUs x the family's core SKU + GiB x its RAM SKU; GPUs per accelerator SKU
    times the count. On-demand: usageType OnDemand; spot: Preemptible ("Spot Preemptible ...")."""
    skus: list[dict[str, Any]] = []
    token = ""
    while True:
        query = {"key": key, **({"pageToken": token} if token else {})}
        page = fetch_json(f"{base}/v1/services/{GCP_COMPUTE_SERVICE}/skus?"
                          + urllib.parse.urlencode(query))
        skus += _need(page.get("skus") if isinstance(page, dict) else None, list,
                      "Cloud Billing Catalog: skus")
        token = page.get("nextPageToken") or ""
        if not token:
            break
    unit: dict[tuple[str, str, str], float] = {}   # (what, usage, region) -> USD per unit-hour
    pattern = re.compile(r"^(?:Spot Preemptible )?(?P<what>.+?) (?:GPU )?running in ")
    for sku in skus:
        category = sku.get("category") or {}
        usage = category.get("usageType")
        match = pattern.match(str(sku.get("description", "")))
        if usage not in ("OnDemand", "Preemptible") or not match:
            continue
        what = match.group("what").replace("Predefined ", "")
        for region in sku.get("serviceRegions") or []:
            unit[(what, usage, region)] = _gcp_unit_price(sku)
    machine_rows: Rows = []
    for region in sorted(machines):
        for machine in sorted(machines[region]):
            shape = gcp_shape(machine)
            if shape is None:
                raise Failed(f"no vCPU/memory shape known for GCP machine type {machine}")
            family, cpus, memory = shape
            prices = []
            for usage in ("OnDemand", "Preemptible"):
                core = unit.get((f"{family} Instance Core", usage, region))
                ram = unit.get((f"{family} Instance Ram", usage, region))
                prices.append(None if core is None or ram is None else cpus * core + memory * ram)
            if prices[0] is None:
                raise Failed(f"the Billing Catalog has no {family} core/RAM SKU in {region}")
            for zone in zones.get((machine, region)) or [""]:
                machine_rows.append((machine, region, zone, fmt(prices[0]), fmt(prices[1])))
    gpu_rows: Rows = []
    for region in sorted(gpus):
        for name, count in sorted(gpus[region]):
            label = GCP_GPU_SKUS.get(name, name)
            on_demand = unit.get((label, "OnDemand", region))
            spot = unit.get((label, "Preemptible", region))
            if on_demand is None:
                raise Failed(f"the Billing Catalog has no {label} GPU SKU in {region}")
            for zone in zones.get((f"{name}*{count}", region)) or [""]:
                gpu_rows.append((name, str(count), region, zone, fmt(count * on_demand),
                                 fmt(None if spot is None else count * spot)))
    return machine_rows, gpu_rows


# --- the catalog files ---

def read_catalog(folder: Path) -> dict[str, Rows]:
    tables = {}
    for name, file in FILES.items():
        path = folder / file
        rows = list(csv.reader(path.open(encoding="utf-8"))) if path.exists() else [[]]
        tables[name] = [tuple(row) for row in rows[1:]]
    return tables


def write_atomically(folder: Path, texts: dict[str, str]) -> None:
    """Each file is written beside its final name, then renamed over it; all are written
    before the first rename, so an error leaves the old catalog whole."""
    folder.mkdir(parents=True, exist_ok=True)
    staged = []
    try:
        for file, text in texts.items():
            handle, temp = tempfile.mkstemp(dir=folder, prefix=f".{file}.")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
            staged.append((temp, folder / file))
        for temp, final in staged:
            os.replace(temp, final)
    finally:
        for temp, _ in staged:
            if os.path.exists(temp):
                os.unlink(temp)


def changes(old: dict[str, Rows], new: dict[str, Rows]) -> list[str]:
    lines = []
    for name in FILES:
        if name not in new:
            continue
        key = 2 if name == "gcp-gpus" else 1   # rows keyed up to the zone
        before = {row[:key + 2]: row[key + 2:] for row in old.get(name, [])}
        after = {row[:key + 2]: row[key + 2:] for row in new[name]}
        for row_key in sorted(before.keys() | after.keys()):
            was, now = before.get(row_key), after.get(row_key)
            label = f"{name}: {' '.join(part for part in row_key if part)}"
            if was is None:
                lines.append(f"+ {label}: on-demand {now[0] or '-'}, spot {now[1] or '-'}")  # type: ignore[index]
            elif now is None:
                lines.append(f"- {label}")
            elif was != now:
                lines.append(f"~ {label}: on-demand {was[0] or '-'} -> {now[0] or '-'}, "
                             f"spot {was[1] or '-'} -> {now[1] or '-'}")
    return lines


def source_text(source: str, how: str, read_on: str = "") -> str:
    """`Source:` and `Read on:` are read by orchestrator.providers.prices (printed by prices)."""
    return (f"# Where the figures come from\n\nSource: {source}\n"
            f"Read on: {read_on or date.today().isoformat()}"
            f"\n\n{how}\n\n"
            "Files: `aws.csv`, `gcp.csv`, `azure.csv` (instance_type,region,zone,on_demand,spot; "
            "USD per hour; zone empty where the source gives none) and `gcp-gpus.csv` "
            "(accelerator,count,region,zone,on_demand,spot: GPUs a GCP node_config attaches, "
            "priced on top of the machine; GCP machine types that carry GPUs (a2, g2) are "
            "priced here without them). Rebuilt by `scripts/refresh_prices.py`.\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--from-skypilot-csv", type=Path, metavar="DIR")
    parser.add_argument("--out", type=Path, default=CATALOG, help="the catalog folder")
    parser.add_argument("--clouds", default="aws,azure,gcp")
    parser.add_argument("--types", default="", help="instance types (default: the catalog's)")
    parser.add_argument("--regions", default="", help="regions (default: the catalog's)")
    for cloud, url in DEFAULT_URLS.items():
        parser.add_argument(f"--{cloud}-url", default=os.environ.get(
            f"ORCHESTRATE_PRICES_{cloud.upper()}_URL", url))
    parser.add_argument("--aws-spot", choices=("auto", "history", "keep"), default="auto",
                        help="AWS spot prices: from EC2 DescribeSpotPriceHistory (history), kept "
                             "from the current catalog (keep), or history when boto3 and AWS "
                             "credentials are there (auto)")
    parser.add_argument("--gcp-key-file", type=Path,
                        help="a file holding the API key (default: $GCP_PRICING_API_KEY)")
    args = parser.parse_args(argv)
    try:
        old = read_catalog(args.out)
        if args.from_skypilot_csv:
            source, new = "skypilot-catalog", from_skypilot(args.from_skypilot_csv)
            how = (f"SkyPilot's catalog (https://github.com/skypilot-org/skypilot-catalog), as "
                   f"trimmed in `{args.from_skypilot_csv}` (its SOURCE.md names the commits):\n\n"
                   + _commits(args.from_skypilot_csv) + "\n\nLeft out: GCP a3 machine types "
                   "(the source prices their host only and lists no H100 GPU rows), TPUs and GPUs "
                   "a node_config cannot name (orchestrator/providers/skypilot_catalog.py).")
            read_on = _read_on(args.from_skypilot_csv)
        else:
            source, read_on = "cloud price APIs", ""
            new, how = from_apis(args, old)
        texts = {FILES[name]: render(name, rows) for name, rows in new.items()}
        texts["SOURCE.md"] = source_text(source, how, read_on)
        write_atomically(args.out, texts)
    except Failed as exc:
        print(f"refresh_prices: {exc}; the catalog in {args.out} is unchanged", file=sys.stderr)
        return 1
    lines = changes(old, new)
    print("\n".join(lines) if lines else "no price changed")
    print(f"wrote {', '.join(sorted(texts))} in {args.out}")
    return 0


def _read_on(folder: Path) -> str:
    """The date the source CSVs were read (`Read on:` in their SOURCE.md), else ''."""
    try:
        text = (folder / "SOURCE.md").read_text(encoding="utf-8")
    except OSError:
        return ""
    match = re.search(r"Read on:\**\s*(\d{4}-\d{2}-\d{2})", text)
    return match.group(1) if match else ""


def _commits(folder: Path) -> str:
    try:
        text = (folder / "SOURCE.md").read_text(encoding="utf-8")
    except OSError:
        return "(no SOURCE.md beside the CSVs)"
    return "\n".join(line for line in text.splitlines() if line.startswith("|")) or text


def from_apis(args: argparse.Namespace, old: dict[str, Rows]) -> tuple[dict[str, Rows], str]:
    clouds = [c for c in args.clouds.split(",") if c]
    types = {t for t in args.types.split(",") if t}
    regions = {r for r in args.regions.split(",") if r}
    new = {name: list(rows) for name, rows in old.items()}
    notes = []

    def wanted(rows: Rows, key_len: int = 1) -> dict[str, set[Any]]:
        found: dict[str, set[Any]] = {}
        for region in regions or {row[key_len] for row in rows}:
            found[region] = set(types) if types and key_len == 1 else \
                {row[0] if key_len == 1 else (row[0], int(row[1])) for row in rows
                 if row[key_len] == region}
        return found

    if "aws" in clouds:
        history = None if args.aws_spot == "keep" else \
            aws_spot_history(wanted(old["aws"]), required=args.aws_spot == "history")
        new["aws"] = aws_prices(args.aws_url.rstrip("/"), wanted(old["aws"]), old["aws"], history)
        spot = ("spot from EC2 DescribeSpotPriceHistory (current prices, Linux/UNIX)"
                if history is not None else "spot figures kept from the previous catalog (AWS "
                "publishes no spot price list; DescribeSpotPriceHistory needs an account)")
        notes.append(f"- AWS: on-demand from the Price List bulk offer files ({args.aws_url}); "
                     f"{spot}.")
        print(f"AWS spot: {spot}", file=sys.stderr)
    if "azure" in clouds:
        new["azure"] = azure_prices(args.azure_url.rstrip("/"), wanted(old["azure"]))
        notes.append(f"- Azure: Retail Prices API ({args.azure_url}).")
    if "gcp" in clouds:
        key = (args.gcp_key_file.read_text().strip() if args.gcp_key_file
               else os.environ.get("GCP_PRICING_API_KEY", ""))
        if not key:
            raise Failed("the Cloud Billing Catalog needs an API key: set GCP_PRICING_API_KEY "
                         "or pass --gcp-key-file")
        zones: dict[tuple[str, str], list[str]] = {}
        for row in old["gcp"]:
            zones.setdefault((row[0], row[1]), []).append(row[2])
        for row in old["gcp-gpus"]:
            zones.setdefault((f"{row[0]}*{row[1]}", row[2]), []).append(row[3])
        new["gcp"], new["gcp-gpus"] = gcp_prices(
            args.gcp_url.rstrip("/"), key, wanted(old["gcp"]), wanted(old["gcp-gpus"], 2), zones)
        notes.append(f"- GCP: Cloud Billing Catalog, Compute Engine SKUs ({args.gcp_url}).")
    return new, "The clouds' public price APIs:\n\n" + "\n".join(notes)


if __name__ == "__main__":
    sys.exit(main())
