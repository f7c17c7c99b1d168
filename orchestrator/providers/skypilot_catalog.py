"""SkyPilot's catalog CSVs (`catalogs/<version>/<cloud>/vms.csv` of skypilot-org/skypilot-catalog)
turned into the price catalog's own files. Pure: text in, rows out; no I/O.

    convert(cloud, text, where) -> Converted     rows per catalog file, and what was left out
    render(name, rows) -> str                    one catalog file's CSV text, header first

The one conversion: `orchestrate prices refresh` (price_cache) runs it on the full catalog it
fetches, `scripts/refresh_prices.py --from-skypilot-csv` on the trimmed files the shipped
subset is built from.

SkyPilot's columns, read by name (their order differs per cloud, and later schema versions add
columns such as `Arch`): InstanceType, AcceleratorName, AcceleratorCount, Price, SpotPrice,
Region, AvailabilityZone (absent for Azure). GCP prices the GPUs a node_config attaches in rows
of their own (empty InstanceType); those become `gcp-gpus.csv`, under GCP's accelerator type
names. Rows no node_config can name are left out and counted: TPUs (empty InstanceType, a
`tpu-...` AcceleratorName), GPUs SkyPilot names but GCP_GPU_NAMES does not map, and GCP's a3
machine types (SkyPilot prices their host alone and lists no H100 GPU rows, so an a3 price would
be a tenth of the real one).
"""
from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

VM_HEADER = ("instance_type", "region", "zone", "on_demand", "spot")
GPU_HEADER = ("accelerator", "count", "region", "zone", "on_demand", "spot")
CLOUDS = ("aws", "gcp", "azure")
# The catalog files each cloud's vms.csv becomes.
FILES = {"aws": ("aws",), "gcp": ("gcp", "gcp-gpus"), "azure": ("azure",)}
# GCP's accelerator types (node_config guestAccelerators) and SkyPilot's names for them.
GCP_GPU_NAMES = {"A100": "nvidia-tesla-a100", "A100-80GB": "nvidia-a100-80gb",
                 "H100": "nvidia-h100-80gb", "L4": "nvidia-l4", "T4": "nvidia-tesla-t4",
                 "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
                 "P4": "nvidia-tesla-p4", "K80": "nvidia-tesla-k80"}
GCP_LEFT_OUT = re.compile(r"^a3-")

Row = tuple[str, ...]


class Malformed(ValueError):
    """A file the catalog cannot be built from; the message says where and why."""


@dataclass
class Converted:
    tables: dict[str, list[Row]] = field(default_factory=dict)   # catalog file name -> rows
    skipped: int = 0                    # rows no node_config can name (TPUs, a3, unknown GPUs)


def fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}".rstrip("0").rstrip(".")


def _price(text: str | None, where: str) -> float | None:
    text = (text or "").strip()
    if not text or text.lower() == "nan":
        return None
    try:
        return float(text)
    except ValueError:
        raise Malformed(f"{where}: not a price: {text!r}") from None


def convert(cloud: str, text: str, where: str) -> Converted:
    """`text`, one cloud's vms.csv, as the rows of its catalog files (sorted, without
    duplicates). `where` names the source in messages ("line N" is appended). Raises Malformed
    for a missing column, a price that is not a number, or a file of no rows."""
    if cloud not in FILES:
        raise ValueError(f"no catalog for cloud {cloud!r}")
    reader = csv.DictReader(io.StringIO(text))
    needed = ["InstanceType", "Price", "SpotPrice", "Region"] + \
        (["AcceleratorName", "AcceleratorCount"] if cloud == "gcp" else [])
    missing = [name for name in needed if name not in (reader.fieldnames or [])]
    if missing:
        raise Malformed(f"{where}: no column {missing[0]!r} (not a SkyPilot vms.csv)")
    result = Converted({name: [] for name in FILES[cloud]})
    for number, row in enumerate(reader, start=2):
        at = f"{where} line {number}"
        if None in row or any(value is None for value in row.values()):
            raise Malformed(f"{at}: {len(row)} fields where the header has "
                            f"{len(reader.fieldnames or [])}")
        on_demand, spot = _price(row["Price"], at), _price(row["SpotPrice"], at)
        region, zone = row["Region"], row.get("AvailabilityZone") or ""
        machine = row["InstanceType"]
        if cloud == "gcp" and not machine:
            name = GCP_GPU_NAMES.get(row["AcceleratorName"])
            try:
                count = int(float(row["AcceleratorCount"]))
            except ValueError:
                raise Malformed(f"{at}: not a count: {row['AcceleratorCount']!r}") from None
            if name is None:
                result.skipped += 1
                continue
            result.tables["gcp-gpus"].append(
                (name, str(count), region, zone, fmt(on_demand), fmt(spot)))
        elif not machine or not region:
            raise Malformed(f"{at}: no instance type or region")
        elif cloud == "gcp" and GCP_LEFT_OUT.match(machine):
            result.skipped += 1
        else:
            result.tables[cloud].append((machine, region, zone, fmt(on_demand), fmt(spot)))
    if not any(result.tables.values()):
        raise Malformed(f"{where}: no rows")
    result.tables = {name: sorted(set(rows)) for name, rows in result.tables.items()}
    return result


def render(name: str, rows: Iterable[Row]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(GPU_HEADER if name.endswith("-gpus") else VM_HEADER)
    writer.writerows(sorted(rows))
    return out.getvalue()
