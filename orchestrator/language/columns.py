"""The columns of a local dataset, read from its first bytes, so that `validate` can say a
`label_column` is not one of them before a job fails on it.

    columns(path, format, read_options) -> list[str] | None     None: not known here

A CSV's header line (the first file of a folder, in name order, as Ray Data reads a folder); a
parquet file's schema, through pyarrow when it is installed (`[ray]`: the base install has no
pyarrow, and then nothing is said; validating such an experiment pays pyarrow's import). A
folder's `key=value` subfolders (Hive partitions) add their keys as columns, as Ray Data reads
them. Remote paths, other formats, compressed CSVs (`.csv.gz`), a header longer than 64 KiB and
CSVs read with `read_options` (another delimiter, no header row) are not looked at.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

HEADER_BYTES = 64 * 1024


def _first(path: Path, suffixes: tuple[str, ...]) -> Path | None:
    """The file itself, or a folder's first data file in name order (the walk stops there)."""
    if path.is_file():
        return path if path.suffix.lower() in suffixes else None
    if not path.is_dir():
        return None
    for entry in sorted(path.iterdir()):
        if entry.name.startswith((".", "_")):   # Ray Data skips hidden and _SUCCESS-like files
            continue
        found = _first(entry, suffixes)
        if found is not None:
            return found
    return None


def _partitions(root: Path, file: Path) -> list[str]:
    """The keys of the `key=value` folders between a dataset's folder and one of its files."""
    if file == root:
        return []
    return [part.split("=", 1)[0] for part in file.relative_to(root).parts[:-1] if "=" in part]


def columns(path: Path, fmt: str, read_options: dict[str, Any] | None) -> list[str] | None:
    try:
        if fmt == "csv" and not read_options:
            first = _first(path, (".csv",))
            if first is None:
                return None
            with first.open(newline="", encoding="utf-8-sig", errors="replace") as file:
                line = file.readline(HEADER_BYTES)
            if not line.endswith(("\n", "\r")) and len(line) >= HEADER_BYTES:
                return None   # a header longer than what is read: not known here
            header = next(csv.reader([line]), None)
            return [name.strip() for name in header] + _partitions(path, first) if header else None
        if fmt == "parquet":
            first = _first(path, (".parquet", ".pq"))
            if first is None:
                return None
            try:
                import pyarrow.parquet as pq
            except ImportError:
                return None
            return list(pq.read_schema(first).names) + _partitions(path, first)
    except (OSError, ValueError, StopIteration):
        return None
    except Exception:  # noqa: BLE001 - a damaged parquet file: the job says what is wrong
        return None
    return None
