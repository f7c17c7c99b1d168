"""What every provider check shares: the result type, the Protocol, and small helpers.

A provider module (aws, gcp, azure, local) satisfies `Provider`: it has `EXTRA` (the pip extra
holding its SDK, or None), `credentials() -> CheckResult` and `check(spec) -> list[CheckResult]`.
SDKs are imported inside those functions; a missing SDK raises `MissingDependency`.
"""
from __future__ import annotations

import difflib
import importlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

from ..errors import MissingDependency

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class CheckResult:
    """One check of one thing: what, how it went, why, what to do, and where in the YAML."""

    name: str
    status: str  # ok | warn | fail
    detail: str
    hint: str | None = None
    field: str = ""  # dotted path in the cluster YAML, e.g. available_node_types.gpu.node_config.InstanceType
    line: int | None = None

    def where(self) -> str:
        if not self.field:
            return ""
        return f"{self.field} (line {self.line})" if self.line else self.field

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "detail": self.detail,
                "hint": self.hint, "field": self.field, "line": self.line}


class Provider(Protocol):
    EXTRA: str | None

    def credentials(self) -> CheckResult: ...

    def check(self, spec: Any) -> list[CheckResult]: ...


class Checks:
    """Collects the results for one cluster spec, attaching each field's dotted path and line."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.results: list[CheckResult] = []

    def add(self, status: str, name: str, detail: str, hint: str | None = None,
            path: tuple = ()) -> CheckResult:
        line = None
        if path and hasattr(self.spec, "line_of"):
            line = self.spec.line_of(tuple(path))
        result = CheckResult(name, status, detail, hint, ".".join(str(p) for p in path), line)
        self.results.append(result)
        return result

    def ok(self, name: str, detail: str, path: tuple = ()) -> CheckResult:
        return self.add(OK, name, detail, None, path)

    def warn(self, name: str, detail: str, hint: str | None = None, path: tuple = ()) -> CheckResult:
        return self.add(WARN, name, detail, hint, path)

    def fail(self, name: str, detail: str, hint: str | None = None, path: tuple = ()) -> CheckResult:
        return self.add(FAIL, name, detail, hint, path)

    @property
    def failed(self) -> bool:
        return any(r.status == FAIL for r in self.results)


def require(module: str, package: str, extra: str):
    """Import an optional SDK module, or raise MissingDependency naming the pip extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(package, extra) from exc


def node_types(document: dict) -> list[tuple[str, dict]]:
    return sorted((document.get("available_node_types") or {}).items())


def node_path(name: str, *rest: Any) -> tuple:
    return ("available_node_types", name, "node_config", *rest)


def close_matches(value: str, offered: Iterable[str], n: int = 5) -> list[str]:
    offered = sorted(set(offered))
    return difflib.get_close_matches(value, offered, n=n, cutoff=0.5)


def listing(values: Iterable[str], limit: int = 8) -> str:
    values = sorted(set(values))
    if not values:
        return "none"
    text = ", ".join(values[:limit])
    return text + (f" (+{len(values) - limit} more)" if len(values) > limit else "")


def suggest(value: str, offered: Iterable[str], what: str) -> str:
    matches = close_matches(value, offered)
    if matches:
        return f"did you mean {listing(matches)}? ({what})"
    return f"offered: {listing(offered)}"


def worst_case(document: dict, group_of: Callable[[str, dict], Any],
               weight_of: Callable[[str, dict], float]) -> dict:
    """The most `weight` (vCPUs, GPUs) each group can reach at once under the worker limits.

    The head counts once; workers of a type reach at most that type's max_workers, and all
    workers together at most the cluster's max_workers, so a group's worst case takes its
    heaviest types first.
    """
    cap = int(document.get("max_workers", 2) or 0)
    head = document.get("head_node_type")
    totals: dict = {}
    members: dict = {}
    for name, node_type in node_types(document):
        group = group_of(name, node_type)
        if group is None:
            continue
        weight = weight_of(name, node_type) or 0
        totals.setdefault(group, 0)
        if name == head:
            totals[group] += weight
        else:
            limit = int(node_type.get("max_workers", cap) or 0)
            limit = max(limit, int(node_type.get("min_workers", 0) or 0))
            members.setdefault(group, []).append((weight, limit))
    for group, entries in members.items():
        remaining = cap
        for weight, limit in sorted(entries, reverse=True):
            count = min(limit, remaining)
            totals[group] += count * weight
            remaining -= count
    return totals


def sdk_message(exc: BaseException) -> str:
    """A one-line message from an SDK exception, never a traceback."""
    text = str(exc).strip().splitlines()
    text = text[0] if text else type(exc).__name__
    return re.sub(r"\s+", " ", text)[:300]


def compare_quota(checks: Checks, name: str, label: str, need: float, limit: float | None,
                  used: float | None, scope: str, remedy: str, unlisted: str = "") -> CheckResult:
    """ok when the worst case fits in what is free of a quota; `used` None means unknown;
    `limit` None means the cloud lists no such quota (a warning, `unlisted` says what to do)."""
    if limit is None:
        return checks.warn(name, f"{scope} lists no quota {label}; the worst case needs {need:g}",
                           unlisted or "check the quota by hand", ("max_workers",))
    free = limit - (used or 0)
    known = f"limit {limit:g}, in use {used:g}" if used is not None else \
        f"limit {limit:g}; running instances not counted"
    if need > free:
        return checks.fail(name, f"the worst case needs {need:g} {label} in {scope}; {free:g} free "
                           f"({known})", f"lower max_workers, or {remedy}", ("max_workers",))
    return checks.ok(name, f"{label}: the worst case needs {need:g}, {free:g} free ({known})",
                     ("max_workers",))
