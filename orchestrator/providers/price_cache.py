"""This machine's copy of SkyPilot's full public price catalog, as `orchestrate prices refresh`
fetches it; `prices` reads it in place of the subset shipped in the package.

    $ORCHESTRATE_HOME/prices/                       private (0700), files 0600
        aws.csv, gcp.csv, gcp-gpus.csv, azure.csv   the catalog's own files, as shipped
        about.json      {"format": 1, "clouds": {CLOUD: {"url", "version", "fetched_at",
                         "rows", "skipped"}}}: where each cloud's file came from and when

    folder() -> Path
    cached() -> dict[str, Fetched]    the clouds the cache holds (none: missing or damaged)
    refresh(clouds, base, timeout) -> list[Fetched]     fetch, check, write; OrchestrateError

The source is what SkyPilot itself reads: `{HOSTED}/{version}/{cloud}/vms.csv` of the
skypilot-catalog repository, CATALOG_VERSION being SkyPilot's CATALOG_SCHEMA_VERSION
(sky/skylet/constants.py: 'v8' when this was written). A cloud with no file there (the index of
that repository this was checked against had no Azure file after v6) is read from the newest
older version that has one (OLDER_VERSIONS), and that is said: the source line names the
version, the refresh its reason. When GitHub answers the default address with its rate limit
(HTTP 429), the S3 mirror SkyPilot falls back to is asked (MIRROR).

Nothing here runs unless `orchestrate prices refresh` asks: pricing (`up`, `status`, `plan`)
never fetches, so a plan in CI is priced from the files at hand, the same on every run. Every
reply is read and converted before anything is written; then each file is written beside its
final name and renamed over it, about.json last, so a failed refresh leaves the cache as it was.
Standard library only (urllib), with a timeout.
"""
from __future__ import annotations

import contextlib
import http.client
import json
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import OrchestrateError
from ..state.folder import home
from ..util.files import private_folder
from . import skypilot_catalog

HOSTED = "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs"
# SkyPilot's own fallback when GitHub rate-limits (HTTP 429; skypilot-org/skypilot#5438).
MIRROR = "https://skypilot-catalog.s3.us-east-1.amazonaws.com/catalogs"
URL_VARIABLE = "ORCHESTRATE_PRICES_CATALOG_URL"
CATALOG_VERSION = "v8"
OLDER_VERSIONS = ("v7", "v6")      # tried in turn, only when a version has no file (HTTP 404)
ABOUT = "about.json"
FORMAT = 1
MAX_BYTES = 256 * 1024 * 1024      # AWS's vms.csv was 3.6 MB in v8
TIMEOUT = 60.0


@dataclass(frozen=True)
class Fetched:
    """One cloud's file in the cache: where it came from and when."""

    cloud: str
    url: str
    version: str
    fetched_at: str          # ISO 8601, UTC
    rows: int                # rows written (all the cloud's catalog files)
    skipped: int             # rows left out (TPUs, a3 hosts, GPUs GCP cannot attach by name)
    note: str = ""           # versions tried that had no file


def folder() -> Path:
    return home() / "prices"


def base_url(given: str | None = None) -> str:
    return (given or os.environ.get(URL_VARIABLE) or HOSTED).rstrip("/")


def cached() -> dict[str, Fetched]:
    """The clouds about.json records whose files are there; {} for a cache that is missing or
    damaged (then the shipped subset is used, and the next refresh replaces it)."""
    path = folder() / ABOUT
    try:
        info = path.stat()
    except OSError:
        return {}
    found = _read_about(str(path), (info.st_mtime_ns, info.st_size))
    return {cloud: entry for cloud, entry in found.items()
            if all((path.parent / f"{name}.csv").is_file()
                   for name in skypilot_catalog.FILES[cloud])}


@lru_cache(maxsize=4)
def _read_about(path: str, stamp: tuple[int, int]) -> dict[str, Fetched]:
    """about.json's clouds, read again when it changes (`stamp`: its mtime and size)."""
    del stamp
    try:
        entries = json.loads(Path(path).read_text(encoding="utf-8"))["clouds"]
        found = {}
        for cloud, entry in entries.items():
            if cloud in skypilot_catalog.FILES:
                found[cloud] = Fetched(**{**entry, "cloud": cloud})
                datetime.fromisoformat(found[cloud].fetched_at)
        return found
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def _opener(url: str) -> urllib.request.OpenerDirector:
    """Straight to a loopback address (a test's recorded replies); otherwise through the
    environment's proxy, as any download."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host in ("localhost", "::1") or host.startswith("127."):
        return urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener()


class _Missing(Exception):
    """HTTP 404: this version has no file for the cloud."""


class _RateLimited(ValueError):
    """HTTP 429: GitHub's rate limit (the mirror is asked instead)."""


def _get(url: str, timeout: float) -> str:
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise OrchestrateError(f"the price catalog URL must be http(s): {url}")
    request = urllib.request.Request(url, headers={"User-Agent": "orchestrate"})
    try:
        with _opener(url).open(request, timeout=timeout) as reply:
            length = str(reply.headers.get("Content-Length") or "")
            body: bytes = reply.read(MAX_BYTES + 1)
        # read(n) returns what came when the connection closes early: a catalog cut at a line
        # would pass every other check
        if length.isdigit() and len(body) < int(length) <= MAX_BYTES:
            raise ValueError(f"the reply was cut short ({len(body)} of {length} bytes)")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise _Missing(f"HTTP 404 {exc.reason}") from None
        kind = _RateLimited if exc.code == 429 else ValueError
        raise kind(f"HTTP {exc.code} {exc.reason}") from None
    except http.client.HTTPException as exc:     # IncompleteRead of a chunked reply, ...
        raise ValueError(f"a broken reply: {type(exc).__name__}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ValueError(f"no answer: {reason}") from None
    if len(body) > MAX_BYTES:
        raise ValueError(f"the reply is larger than {MAX_BYTES // 2**20} MiB")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the reply is not UTF-8 text") from None


def _fetch(cloud: str, base: str, timeout: float) -> tuple[Fetched, dict[str, str]]:
    """One cloud's vms.csv, fetched and converted: its record and its catalog files' texts."""
    missing: list[str] = []
    last = ""
    for version in (CATALOG_VERSION, *OLDER_VERSIONS):
        url = f"{base}/{version}/{cloud}/vms.csv"
        try:
            try:
                text = _get(url, timeout)
            except _RateLimited:
                if base != HOSTED:
                    raise
                url = f"{MIRROR}/{version}/{cloud}/vms.csv"
                text = _get(url, timeout)
        except _Missing as exc:
            missing.append(url)
            last = str(exc)
            continue
        except ValueError as exc:
            raise _failed(cloud, url, str(exc)) from None
        try:
            converted = skypilot_catalog.convert(cloud, text, "the reply")
        except skypilot_catalog.Malformed as exc:
            raise _failed(cloud, url, str(exc)) from None
        note = f"no file at {', '.join(missing)}" if missing else ""
        record = Fetched(cloud, url, version, datetime.now(timezone.utc).isoformat(
            timespec="seconds"), sum(len(rows) for rows in converted.tables.values()),
            converted.skipped, note)
        return record, {f"{name}.csv": skypilot_catalog.render(name, rows)
                        for name, rows in converted.tables.items()}
    raise _failed(cloud, missing[0], f"{last} (and at {', '.join(missing[1:])})")


def _failed(cloud: str, url: str, reason: str) -> OrchestrateError:
    return OrchestrateError(
        f"the {cloud} price catalog ({url}): {reason}; nothing was written, the prices in "
        f"{folder()} are as they were",
        hint=f"check the address ({URL_VARIABLE} or --catalog-url) and the network; "
             "without a refresh, prices come from the catalog as it is")


def refresh(clouds: list[str], base: str, timeout: float = TIMEOUT) -> list[Fetched]:
    """Fetch each cloud's file, check and convert them all, then write them into folder()
    (about.json merged: a cloud not refreshed keeps its files and record)."""
    fetched: list[Fetched] = []
    texts: dict[str, str] = {}
    for cloud in clouds:
        record, files = _fetch(cloud, base, timeout)
        fetched.append(record)
        texts.update(files)
    records = {cloud: {k: v for k, v in asdict(entry).items() if k != "cloud"}
               for cloud, entry in cached().items()}
    records.update({entry.cloud: {k: v for k, v in asdict(entry).items() if k != "cloud"}
                    for entry in fetched})
    texts[ABOUT] = json.dumps({"format": FORMAT, "source": "skypilot-catalog",
                               "clouds": records}, indent=2, sort_keys=True) + "\n"
    try:
        _write_all(folder(), texts)
    except OSError as exc:
        raise OrchestrateError(f"cannot write the price catalog into {folder()}: "
                               f"{exc.strerror or exc}",
                               hint="ORCHESTRATE_HOME (default ~/.orchestrate) must be a "
                                    "writable folder") from None
    return fetched


def _write_all(target: Path, texts: dict[str, str]) -> None:
    """Every file staged beside its final name first (about.json renamed last), so an error
    while staging leaves the old cache whole."""
    private_folder(target)
    staged: list[tuple[str, Path]] = []
    try:
        for name in sorted(texts, key=lambda n: n == ABOUT):
            handle, temp = tempfile.mkstemp(dir=target, prefix=f".{name}.")
            staged.append((temp, target / name))
            os.fchmod(handle, 0o600)
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(texts[name])
                out.flush()
                os.fsync(out.fileno())
        for temp, final in staged:
            os.replace(temp, final)
    finally:
        for temp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)


def as_json(fetched: list[Fetched]) -> dict[str, Any]:
    return {"folder": str(folder()), "clouds": [asdict(entry) for entry in fetched]}
