"""Terminal and machine-readable output shared by the commands."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any


def add_format_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format", choices=("text", "json"), default="text",
        help="output format: text for people, json for scripts (default: text)",
    )


def seconds(text: str) -> float:
    """argparse type of a time limit: a finite number of seconds above 0."""
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def is_interactive() -> bool:
    """True only when a person can answer a prompt: stdin and stdout are terminals."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def confirm(question: str, *, assume_yes: bool) -> bool:
    """Ask a yes/no question; never prompts when -y is given or nobody is at a terminal."""
    if assume_yes or not is_interactive():
        return True
    answer = input(f"{question} [y/N] ").strip().lower()
    return answer in ("y", "yes")


def emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def printable(text: str) -> str:
    """`text` with control characters (a terminal's escape sequences among them) shown as
    `\\xNN` escapes: cells may come from a shared state or a cluster, which are data."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def _cell(value: Any, max_cell: int | None) -> str:
    text = "" if value is None else printable(" ".join(str(value).split()))
    if max_cell is None or len(text) <= max_cell:
        return text
    return text[: max_cell - 3] + "..."


def format_table(rows: Iterable[Sequence[Any]], headers: Sequence[str],
                 max_cell: int | None = None) -> str:
    """Columns aligned; prose cells longer than max_cell are cut (--format json has them whole)."""
    table = [[str(h) for h in headers]] + [[_cell(c, max_cell) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in table]
    return "\n".join(lines)


def print_table(rows: Iterable[Sequence[Any]], headers: Sequence[str],
                max_cell: int | None = None) -> None:
    print(format_table(rows, headers, max_cell))


def info(message: str) -> None:
    """Progress for people: goes to stderr so stdout stays clean for data."""
    print(message, file=sys.stderr, flush=True)
