"""Words for people: suggestions for a misspelt word (the spec checks, the provider preflight)
sizes in bytes, secrets hidden, and nested settings as dotted keys (parameters compared side by
side)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def close_matches(word: str, choices: Iterable[object], n: int = 1, cutoff: float = 0.6) -> list[str]:
    import difflib  # only when something is misspelt

    return difflib.get_close_matches(str(word), sorted({str(c) for c in choices}), n=n,
                                     cutoff=cutoff)


def did_you_mean(word: object, choices: Iterable[object]) -> str | None:
    matches = close_matches(str(word), choices)
    return f"did you mean '{matches[0]}'?" if matches else None


def size_text(count: float) -> str:
    """`812.0 KiB`, `3.4 MiB`, `1.2 GiB`."""
    for unit in ("KiB", "MiB"):
        count /= 1024
        if count < 1024:
            return f"{count:.1f} {unit}"
    return f"{count / 1024:.1f} GiB"


def hide(text: str, secrets: dict[str, str]) -> str:
    """`text` with each of the secrets' values (4 characters or more) shown as `***`."""
    for value in sorted(secrets.values(), key=len, reverse=True):
        if len(value) >= 4:
            text = text.replace(value, "***")
    return text


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys: {"a": {"b": 1}} -> {"a.b": 1}. Lists stay
    values; an empty mapping is dropped."""
    if not isinstance(value, dict):
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in value.items():
        flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def differing(rows: list[dict[str, Any]]) -> list[str]:
    """The keys whose values are not the same in every row (a key missing somewhere differs)."""
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    return [k for k in keys if len({repr(row.get(k, "<unset>")) for row in rows}) > 1]
