"""The columns of a local dataset, read from its first bytes, so that `validate` can say a
`label_column` is not one of them before a job fails on it.

    columns(path, format, read_options) -> list[str] | None     None: not known here

A CSV's header line (the first file of a folder, in name order, as Ray Data reads a folder); a
parquet file's schema, through pyarrow when it is installed (`[ray]`: the base install has no
pyarrow, and then nothing is said). Remote paths, other formats and CSVs read with
`read_options` (another delimiter, no header row) are not looked at.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

HEADER_BYTES = 64 * 1024


def _first(path: Path, suffixes: tuple[str, ...]) -> Path | None:
    if path.is_file():
        return path
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in suffixes)
        return found[0] if found else None
    return None


def columns(path: Path, fmt: str, read_options: dict[str, Any] | None) -> list[str] | None:
    try:
        if fmt == "csv" and not read_options:
            first = _first(path, (".csv",))
            if first is None:
                return None
            with first.open(newline="", errors="replace") as file:
                header = next(csv.reader([file.readline(HEADER_BYTES)]), None)
            return [name.strip() for name in header] if header else None
        if fmt == "parquet":
            first = _first(path, (".parquet", ".pq"))
            if first is None:
                return None
            try:
                import pyarrow.parquet as pq
            except ImportError:
                return None
            return list(pq.read_schema(first).names)
    except (OSError, ValueError, StopIteration):
        return None
    except Exception:  # noqa: BLE001 - a damaged parquet file: the job says what is wrong
        return None
    return None
