"""The price catalog shipped in the package: public list prices per instance type and region.

    lookup(cloud, instance_type, region, zone=None, spot=False) -> float | None
    accelerator(cloud, name, count, region, zone=None, spot=False) -> float | None
    CATALOG_SOURCE    what to print beside every price shown: "list prices of 2026-11-26
                      (skypilot-catalog)"
    CATALOG_DATE      the day the figures were read ("2026-11-26"); CATALOG_NAME where from

The catalog is `catalog/{aws,gcp,azure}.csv` (instance_type,region,zone,on_demand,spot; USD per
hour) and `catalog/gcp-gpus.csv` (accelerator,count,region,zone,on_demand,spot: GCP prices the
GPUs a node_config attaches on top of the machine). `scripts/refresh_prices.py` rebuilds them;
`catalog/SOURCE.md` says from what (its `Source:` and `Read on:` lines give CATALOG_NAME and
CATALOG_DATE). Read with the standard library, once, when first asked.
"""
from __future__ import annotations

import re
from functools import cache
from importlib import resources

Row = tuple[str, float | None, float | None]          # zone, on-demand, spot
Table = dict[tuple[str, str], list[Row]]              # (key, region) -> one row per zone


def _number(text: str) -> float | None:
    return float(text) if text.strip() else None


def _read(file: str) -> str:
    return resources.files(__package__).joinpath("catalog").joinpath(file).read_text(
        encoding="utf-8")


@cache
def _about() -> dict[str, str]:
    text = _read("SOURCE.md")
    found = dict(re.findall(r"^(Source|Read on): *(.+?) *$", text, re.MULTILINE))
    source, read_on = found.get("Source", "unknown source"), found.get("Read on", "unknown date")
    return {"CATALOG_NAME": source, "CATALOG_DATE": read_on,
            "CATALOG_SOURCE": f"list prices of {read_on} ({source})"}


def __getattr__(name: str) -> str:
    """CATALOG_SOURCE, CATALOG_DATE and CATALOG_NAME, read from catalog/SOURCE.md when first
    asked."""
    try:
        return _about()[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


@cache
def _table(file: str) -> Table:
    import csv

    table: Table = {}
    text = _read(file)
    for row in csv.DictReader(text.splitlines()):
        key = row["instance_type"] if "instance_type" in row else \
            f"{row['accelerator']}*{row['count']}"
        table.setdefault((key, row["region"]), []).append(
            (row["zone"], _number(row["on_demand"]), _number(row["spot"])))
    return table


def _price(rows: list[Row] | None, zone: str | None, spot: bool) -> float | None:
    """On-demand is one price per region. Spot differs per zone: the zone's when one is named
    and listed, else the highest in the region (conservative: the autoscaler may pick any)."""
    if not rows:
        return None
    if not spot:
        known = [on_demand for _, on_demand, _ in rows if on_demand is not None]
        return max(known) if known else None
    if zone:
        in_zone = [price for name, _, price in rows if name == zone]
        if in_zone:
            return in_zone[0]
    known = [price for _, _, price in rows if price is not None]
    return max(known) if known else None


def lookup(cloud: str, instance_type: str, region: str, zone: str | None = None,
           spot: bool = False) -> float | None:
    """USD per hour of one `instance_type` in `region` (spot: in `zone` when given and listed,
    else the highest spot price of the region), or None when the catalog lacks it; never a
    guess. GCP machine types are priced without the GPUs they carry (see `accelerator`)."""
    try:
        table = _table(f"{cloud}.csv")
    except FileNotFoundError:
        return None
    return _price(table.get((instance_type, region)), zone, spot)


def accelerator(cloud: str, name: str, count: int, region: str, zone: str | None = None,
                spot: bool = False) -> float | None:
    """USD per hour of `count` GPUs `name` (GCP's accelerator type, e.g. nvidia-tesla-t4)
    attached to one machine, or None when the catalog lacks that name, count or region."""
    try:
        table = _table(f"{cloud}-gpus.csv")
    except FileNotFoundError:
        return None
    return _price(table.get((f"{name}*{count}", region)), zone, spot)
