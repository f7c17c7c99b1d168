"""orchestrate prices refresh: fetch SkyPilot's full public price catalog into this machine's
cache ($ORCHESTRATE_HOME/prices/), which `up`, `status` and `plan` then price from.

The only command that fetches prices: the others read the cache or the subset shipped in the
package, and never reach the network for a price (a plan in CI prices the same on every run).
"""
from __future__ import annotations

import argparse

from ..output import add_format_argument, emit_json, info, print_table, seconds
from ..providers import price_cache, skypilot_catalog


def _clouds(text: str) -> list[str]:
    clouds = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in clouds if c not in skypilot_catalog.CLOUDS]
    if not clouds or unknown:
        raise argparse.ArgumentTypeError(
            f"expected clouds among {','.join(skypilot_catalog.CLOUDS)}, got {text!r}")
    return list(dict.fromkeys(clouds))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("refresh",),
                        help="refresh: fetch the full catalog of each cloud and cache it")
    parser.add_argument("--clouds", type=_clouds, default=list(skypilot_catalog.CLOUDS),
                        metavar="CLOUD,...",
                        help="the clouds to fetch (default: aws,gcp,azure); the others keep "
                             "what the cache holds")
    parser.add_argument("--catalog-url", metavar="URL",
                        help="where SkyPilot's catalogs are (the folder of v8/aws/vms.csv; "
                             f"default: ${price_cache.URL_VARIABLE}, else {price_cache.HOSTED})")
    parser.add_argument("--timeout", type=seconds, default=price_cache.TIMEOUT, metavar="S",
                        help="seconds to wait for each reply (default: 60)")
    add_format_argument(parser)


def run(args: argparse.Namespace) -> int:
    fetched = price_cache.refresh(args.clouds, price_cache.base_url(args.catalog_url),
                                  args.timeout)
    if args.format == "json":
        emit_json(price_cache.as_json(fetched))
        return 0
    print_table([(entry.cloud, entry.rows, entry.fetched_at, entry.url) for entry in fetched],
                ("CLOUD", "ROWS", "FETCHED (UTC)", "FROM"))
    for entry in fetched:
        if entry.skipped:
            info(f"{entry.cloud}: {entry.skipped} rows left out (TPUs, a3 hosts and GPUs a "
                 "node_config cannot name)")
        if entry.note:
            info(f"{entry.cloud}: {entry.note}; read {entry.version}")
    info(f"cached in {price_cache.folder()}; `up`, `status` and `plan` price from it")
    return 0
