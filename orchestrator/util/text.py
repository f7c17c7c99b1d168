"""Suggestions for a misspelt word, used by the spec checks and the provider preflight."""
from __future__ import annotations

from collections.abc import Iterable


def close_matches(word: str, choices: Iterable[object], n: int = 1, cutoff: float = 0.6) -> list[str]:
    import difflib  # only when something is misspelt

    return difflib.get_close_matches(str(word), sorted({str(c) for c in choices}), n=n,
                                     cutoff=cutoff)


def did_you_mean(word: object, choices: Iterable[object]) -> str | None:
    matches = close_matches(str(word), choices)
    return f"did you mean '{matches[0]}'?" if matches else None
