"""What every provider shares: the `Provider` Protocol, preflight results, and small helpers.

A provider is one module (aws, gcp, azure, local) that satisfies `Provider`: everything
orchestrate knows about one `provider.type` of Ray's cluster YAML, from the checks on the file
to what `down` must add. How its clusters are launched and reached is a launch backend's
(orchestrator.launch, named by `LAUNCH`); what the `ray up` backend asks of a provider of Ray's
cluster launcher is `RayUpSite`. Nothing outside `orchestrator.providers` compares provider names; it
asks the module. SDKs are imported inside the functions that use them; a missing SDK raises
`MissingDependency`.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..errors import Problem
from ..util.progress import Progress
from ..util.text import close_matches
from ..yamlload import Document

OK, WARN, FAIL = "ok", "warn", "fail"

Config = dict[str, Any]          # a cluster document in Ray's dialect
FieldPath = tuple[str | int, ...]

Group = TypeVar("Group", bound=Hashable)  # what `worst_case` sums weights by


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

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail,
                "hint": self.hint, "field": self.field, "line": self.line}


@dataclass(frozen=True)
class NodePrice:
    """One node type's price (`Provider.node_price`; orchestrator.providers.cost sums them)."""

    node_type: str
    instance: str          # instance/machine type; "host" on-prem
    region: str            # "" on-prem
    spot: bool
    hourly: float | None   # USD per hour; None: unknown (not in the catalog)


class ClusterView(Protocol):
    """What the preflight checks read of a validated cluster spec."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> Path: ...

    @property
    def document(self) -> Config: ...

    def line_of(self, path: FieldPath) -> int | None: ...


class Provider(Protocol):
    """Everything orchestrate knows about one provider type. Implemented by a module."""

    # Data members are read-only properties so that a module's constants (of narrower types,
    # e.g. a tuple of 2 strings) satisfy them.
    @property
    def NAME(self) -> str:
        """`provider.type` in Ray's cluster YAML."""

    @property
    def LAUNCH(self) -> str:
        """The launch backend its clusters come up with (`orchestrator.launch.BACKENDS`)."""

    @property
    def EXTRA(self) -> str | None:
        """The pip extra holding its SDK (None: it needs none)."""

    @property
    def KEYS(self) -> tuple[str, ...]:
        """Provider fields Ray's provider reads (others get a did-you-mean warning)."""

    @property
    def REQUIRED(self) -> tuple[str, ...]:
        """Provider fields Ray needs in practice; its schema does not require them."""

    @property
    def REPLACE_FIELDS(self) -> tuple[str, ...]:
        """Provider fields whose change needs a new cluster (`down`, then `up`), besides
        provider.type and the head's node config, which need one everywhere."""

    @property
    def SCALING_FIELDS(self) -> tuple[str, ...]:
        """Provider fields the head's autoscaler picks up without a restart (`up --no-restart`),
        besides worker counts and autoscaling settings, which every provider has."""

    @property
    def FIXED_HOSTS(self) -> bool:
        """The cluster has all the hosts it will ever have (on-prem: the listed hosts); False
        where an autoscaler may add nodes (a run bigger than the nodes up now may still fit)."""

    @property
    def INSTANCE_TYPED(self) -> bool:
        """A shorthand group names its node's instance type (clouds; `group_problems` requires
        it), or describes the node by its resources alone (a Kubernetes pod, an on-prem host)."""

    @property
    def LEGACY_KEYS(self) -> tuple[str, ...]:
        """Removed top-level keys Ray still reads for this provider (`problems` checks them)."""

    @property
    def RAY_REPLACES(self) -> tuple[str, ...]:
        """Top-level keys Ray's own preparation for this provider replaces before it validates
        (on-prem: the node types): an empty one is dropped with a warning, as Ray ignores it;
        `problems` refuses a non-empty one."""

    @property
    def DEFAULT_START(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Ray's default start commands (ray/autoscaler/<provider>/defaults.yaml), (head,
        workers); hardening rewrites them when the file has none."""

    # --- the file (orchestrator.language) ---
    def problems(self, doc: Document, data: Config) -> list[Problem]:
        """Checks beyond the schema and REQUIRED, on the document as the user wrote it."""

    def group_problems(self, doc: Document, path: FieldPath, group: Config) -> list[Problem]:
        """Checks of one head/workers shorthand group."""

    def node_config(self, group: Config) -> Config:
        """A shorthand group (instance_type, image, gpus, disk_gb, spot, ...) as Ray's node_config."""

    # --- rendering (orchestrator.render) ---
    def dashboard_host(self, config: Config, chosen: str | None) -> str:
        """Where the head's dashboard listens, given the user's own --dashboard-host (or None).
        A loopback address means it is reached only through an SSH forward."""

    def tls_names(self, config: Config) -> tuple[str, ...]:
        """The hosts the config names, for the node certificate of Ray's gRPC TLS (addresses
        or host names); empty: no TLS, since the nodes' addresses are not known before launch
        (clouds, an on-prem coordinator)."""

    # --- up and down (orchestrator.cluster) ---
    def expected_nodes(self, config: Config) -> int:
        """The head plus the workers Ray keeps running at the least."""

    def not_joined(self, config: Config, node_ips: tuple[str, ...]) -> list[str]:
        """The hosts the config names that are not among `node_ips` (the alive nodes), for
        `up`'s "partial" message; none on clouds, whose files name no hosts."""

    def after_down(self, config: Config, progress: Progress) -> list[str]:
        """What tearing the cluster down leaves to do on the site (on-prem: the hosts outlive
        it); returns a warning per host it could not reach."""

    # --- prices (orchestrator.providers.cost) ---
    def price_layout(self, config: Config) -> Config:
        """`head_node_type`, `available_node_types` and `max_workers` as the cluster runs them:
        the config's own, Ray's default node types when it names none, on-prem the hosts."""

    def node_price(self, config: Config, name: str, node_type: Config) -> NodePrice:
        """One node type's price per hour: its instance type in the provider's region (and
        zone), spot where its node_config asks for it; on-prem the file's host price."""

    def price_warning(self, config: Config, name: str, node_type: Config) -> str | None:
        """Why `node_price` is unknown, naming the field path; None when it is known."""

    def price_source(self, config: Config) -> str:
        """Where the prices come from, printed beside them."""

    # --- preflight (orchestrate check, up) ---
    def credentials(self) -> CheckResult:
        """Whether this machine has usable credentials for the provider."""

    def check(self, spec: ClusterView) -> list[CheckResult]:
        """Every preflight check of one cluster."""


class RayUpSite(Protocol):
    """What the `ray up` launch backend (orchestrator.launch.ray_up.backend) asks of a provider of Ray's
    cluster launcher; a provider launched by another backend needs none of it."""

    def head_address(self, config: Config) -> str | None:
        """The head's address when the config names it; None: ask `ray get-head-ip`."""

    def launcher_env(self) -> dict[str, str]:
        """Environment for `ray up` / `ray down` of this provider."""

    def location(self, config: Config) -> str:
        """Where the config's cluster lives, for messages: `AWS us-west-2`."""

    def bootstrap_key(self, config: Config) -> str | None:
        """For a config naming no ssh key: the key file Ray's bootstrap wrote on this machine
        for the running head's key pair, if it is here (None: none, or not here)."""


class Checks:
    """Collects the results for one cluster spec, attaching each field's dotted path and line."""

    def __init__(self, spec: ClusterView) -> None:
        self.spec = spec
        self.results: list[CheckResult] = []

    def add(self, status: str, name: str, detail: str, hint: str | None = None,
            path: FieldPath = ()) -> CheckResult:
        line = self.spec.line_of(tuple(path)) if path else None
        result = CheckResult(name, status, detail, hint, ".".join(str(p) for p in path), line)
        self.results.append(result)
        return result

    def ok(self, name: str, detail: str, path: FieldPath = ()) -> CheckResult:
        return self.add(OK, name, detail, None, path)

    def warn(self, name: str, detail: str, hint: str | None = None, path: FieldPath = ()) -> CheckResult:
        return self.add(WARN, name, detail, hint, path)

    def fail(self, name: str, detail: str, hint: str | None = None, path: FieldPath = ()) -> CheckResult:
        return self.add(FAIL, name, detail, hint, path)

    @property
    def failed(self) -> bool:
        return any(r.status == FAIL for r in self.results)


def node_types(document: Config) -> list[tuple[str, Config]]:
    return sorted((document.get("available_node_types") or {}).items())


def node_path(name: str, *rest: str | int) -> FieldPath:
    return ("available_node_types", name, "node_config", *rest)


def listing(values: Iterable[str], limit: int = 8) -> str:
    values = sorted(set(values))
    if not values:
        return "none"
    text = ", ".join(values[:limit])
    return text + (f" (+{len(values) - limit} more)" if len(values) > limit else "")


def suggest(value: str, offered: Iterable[str], what: str) -> str:
    matches = close_matches(value, offered, n=5, cutoff=0.5)
    if matches:
        return f"did you mean {listing(matches)}? ({what})"
    return f"offered: {listing(offered)}"


def worst_case(document: Config, group_of: Callable[[str, Config], Group | None],
               weight_of: Callable[[str, Config], float]) -> dict[Group, float]:
    """The most `weight` (vCPUs, GPUs) each group can reach at once under the worker limits.

    The head counts once; workers of a type reach at most that type's max_workers, and all
    workers together at most the cluster's max_workers, so a group's worst case takes its
    heaviest types first.
    """
    cap = int(document.get("max_workers", 2) or 0)
    head = document.get("head_node_type")
    totals: dict[Group, float] = {}
    members: dict[Group, list[tuple[float, int]]] = {}
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
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
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
