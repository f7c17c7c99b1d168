"""Public list prices per instance type and region: SkyPilot's full catalog when
`orchestrate prices refresh` has cached it on this machine, else the subset shipped in the
package.

    lookup(cloud, instance_type, region, zone=None, spot=False) -> float | None
    accelerator(cloud, name, count, region, zone=None, spot=False) -> float | None
    source(cloud) -> str      what to print beside every price of that cloud: "list prices of
                              2026-12-03 (skypilot-catalog, full catalog cached by `orchestrate
                              prices refresh`)", or the shipped subset's date, saying so
    subset_hint(cloud) -> str     for a price the catalog lacks: " (... `orchestrate prices
                              refresh` fetches the full one)" while the shipped subset is used

Which catalog a cloud's prices come from is decided per cloud at each call: the cache
(price_cache: `$ORCHESTRATE_HOME/prices/`) when it holds that cloud, else the package's
`catalog/`. A cache older than STALE_DAYS is still used; its source line says how old it is.
Reading never fetches anything.

Both have the same files: `{aws,gcp,azure}.csv` (instance_type,region,zone,on_demand,spot; USD
per hour) and `gcp-gpus.csv` (accelerator,count,region,zone,on_demand,spot: GCP prices the GPUs
a node_config attaches on top of the machine). `scripts/refresh_prices.py` rebuilds the shipped
ones; `catalog/SOURCE.md` says from what (its `Source:` and `Read on:` lines name it and date
it). Read with the standard library; each file parsed once (a cached one again when it changes).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # read when a price is first asked for: `validate` never loads it
    from . import price_cache

Row = tuple[str, float | None, float | None]          # zone, on-demand, spot
Table = dict[tuple[str, str], list[Row]]              # (key, region) -> one row per zone

STALE_DAYS = 7
REFRESH = "`orchestrate prices refresh`"


def _number(text: str) -> float | None:
    return float(text) if text.strip() else None


def _shipped_text(file: str) -> str:
    return resources.files(__package__).joinpath("catalog").joinpath(file).read_text(
        encoding="utf-8")


@cache
def _shipped_about() -> tuple[str, str]:
    """(name, date) of the shipped catalog, from catalog/SOURCE.md."""
    found = dict(re.findall(r"^(Source|Read on): *(.+?) *$", _shipped_text("SOURCE.md"),
                            re.MULTILINE))
    return found.get("Source", "unknown source"), found.get("Read on", "unknown date")


def _parse(text: str) -> Table:
    import csv

    table: Table = {}
    for row in csv.DictReader(text.splitlines()):
        key = row["instance_type"] if "instance_type" in row else \
            f"{row['accelerator']}*{row['count']}"
        table.setdefault((key, row["region"]), []).append(
            (row["zone"], _number(row["on_demand"]), _number(row["spot"])))
    return table


@cache
def _shipped(file: str) -> Table:
    try:
        return _parse(_shipped_text(file))
    except FileNotFoundError:
        return {}


@lru_cache(maxsize=8)
def _cached_file(path: str, stamp: tuple[int, int]) -> Table:
    """A cached file, parsed again when it changes (`stamp`: its mtime and size)."""
    del stamp
    return _parse(Path(path).read_text(encoding="utf-8"))


@dataclass(frozen=True)
class _InUse:
    folder: Path | None            # None: the shipped subset
    entry: price_cache.Fetched | None


def _in_use(cloud: str) -> _InUse:
    from . import price_cache

    entry = price_cache.cached().get(cloud)
    return _InUse(price_cache.folder(), entry) if entry else _InUse(None, None)


def _table(cloud: str, file: str) -> Table:
    used = _in_use(cloud)
    if used.folder is None:
        return _shipped(file)
    path = used.folder / file
    try:
        info = path.stat()
        return _cached_file(str(path), (info.st_mtime_ns, info.st_size))
    except (OSError, ValueError, KeyError):   # gone or damaged since: the shipped subset
        return _shipped(file)


def source(cloud: str) -> str:
    """What to print beside a price of `cloud`: the catalog, its date, and which one."""
    entry = _in_use(cloud).entry
    name, shipped_date = _shipped_about()
    if entry is None:
        regions = {region for _, region in _shipped(f"{cloud}.csv")}
        count = f": {len(regions)} regions" if regions else ""
        return (f"list prices of {shipped_date} ({name}, the subset shipped with "
                f"orchestrate{count}; {REFRESH} fetches all)")
    fetched = datetime.fromisoformat(entry.fetched_at)
    if fetched.tzinfo is None:
        fetched = fetched.replace(tzinfo=timezone.utc)
    from .price_cache import CATALOG_VERSION

    label = "skypilot-catalog" + ("" if entry.version == CATALOG_VERSION
                                  else f" {entry.version}")
    age = (datetime.now(timezone.utc) - fetched).days
    stale = f"; {age} days old: {REFRESH} updates it" if age >= STALE_DAYS else ""
    return (f"list prices of {fetched.date().isoformat()} ({label}, full catalog cached by "
            f"{REFRESH}{stale})")


def subset_hint(cloud: str) -> str:
    """Said after "not in the price catalog" while `cloud`'s prices come from the shipped
    subset; "" once the full catalog is cached."""
    if _in_use(cloud).entry is not None:
        return ""
    return f" (the shipped catalog is a subset: {REFRESH} fetches the full one)"


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
    return _price(_table(cloud, f"{cloud}.csv").get((instance_type, region)), zone, spot)


def accelerator(cloud: str, name: str, count: int, region: str, zone: str | None = None,
                spot: bool = False) -> float | None:
    """USD per hour of `count` GPUs `name` (GCP's accelerator type, e.g. nvidia-tesla-t4)
    attached to one machine, or None when the catalog lacks that name, count or region."""
    return _price(_table(cloud, f"{cloud}-gpus.csv").get((f"{name}*{count}", region)), zone,
                  spot)
