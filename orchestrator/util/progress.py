"""The one type of a progress callback: a line of what is happening now, for a person to read
(commands print it; tests and quiet callers pass `silent`)."""
from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]


def silent(_line: str) -> None:
    """A Progress that says nothing."""
