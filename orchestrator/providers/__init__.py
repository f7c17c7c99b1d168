"""The providers orchestrate supports: one module each, one explicit registry.

    get(name) -> Provider                      the module for a `provider.type`
    ray_up_site(name) -> RayUpSite             the same module, as the `ray up` backend asks it
    named_head(name, config) -> str | None     the head's address a config names (on-prem)
    most_nodes(config) -> int                  the most nodes a config's cluster can have at once
    PROVIDERS                                  name -> module; the cluster schema's provider
                                               enum is generated from it (scripts/build_schemas.py)
    check_cluster(spec) -> list[CheckResult]   every preflight check for one cluster spec
    ensure_ready(spec) -> list[CheckResult]    the same, raising PreflightError on any failure
    check_credentials() -> list[CheckResult]   which clouds have usable credentials (no file)

Adding a provider is one module satisfying `base.Provider` plus its tests, and a line here.
A provider module is imported when it is first asked for (`validate` of an AWS file imports the
aws module alone), and imports its SDK only inside its functions.

Endpoints (for private endpoints and for tests): boto3 reads AWS_ENDPOINT_URL itself;
ORCHESTRATE_GCP_ENDPOINT sets the Compute Engine API endpoint; ORCHESTRATE_AZURE_ENDPOINT sets
the Azure Resource Manager endpoint (and turns off Entra instance discovery, which would
otherwise ask login.microsoftonline.com about a custom AZURE_AUTHORITY_HOST).
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from ..errors import MissingDependency, PreflightError
from .base import FAIL, OK, WARN, CheckResult, ClusterView, Provider, RayUpSite

_Module = TypeVar("_Module")


class _Registry(Mapping[str, _Module], Generic[_Module]):
    """`provider.type` -> its module (orchestrator/providers/<name>.py), imported when asked for."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names

    def __getitem__(self, name: str) -> _Module:
        if name not in self._names:
            raise KeyError(name)
        return cast(_Module, importlib.import_module(f"{__name__}.{name}"))

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names


PROVIDERS: Mapping[str, Provider] = _Registry(("aws", "gcp", "azure", "local", "kuberay"))
# The providers launched by `ray up` (LAUNCH "ray-up"): all but kuberay (KubeRay's operator).
RAY_UP: Mapping[str, RayUpSite] = _Registry(("aws", "gcp", "azure", "local"))


if TYPE_CHECKING:   # mypy checks each module against the protocols the registries promise
    from . import aws, azure, gcp, kuberay, local

    _PROVIDERS: dict[str, Provider] = {"aws": aws, "gcp": gcp, "azure": azure, "local": local,
                                       "kuberay": kuberay}
    _RAY_UP: dict[str, RayUpSite] = {"aws": aws, "gcp": gcp, "azure": azure, "local": local}


def __getattr__(name: str) -> Any:
    """`providers.aws` and the rest, imported on first use like the registry's."""
    if name in PROVIDERS:
        return PROVIDERS[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CheckResult", "PROVIDERS", "Provider", "RAY_UP", "RayUpSite", "OK", "WARN", "FAIL",
           "get", "ray_up_site", "named_head", "most_nodes", "check_cluster", "ensure_ready",
           "check_credentials", "failures"]


class SpecWithProvider(ClusterView, Protocol):
    @property
    def provider(self) -> str: ...


def get(name: str) -> Provider:
    """The provider module for `name`; the schema has already refused any other name."""
    try:
        return PROVIDERS[name]
    except KeyError:
        raise PreflightError(f"orchestrate has no provider {name!r}",
                             hint=f"providers: {', '.join(PROVIDERS)}") from None


def ray_up_site(name: str) -> RayUpSite:
    """The provider module for `name`, as the `ray up` backend asks it."""
    get(name)  # an unknown name: the same error
    try:
        return RAY_UP[name]
    except KeyError:
        raise PreflightError(f"provider {name!r} is not launched with `ray up`") from None


def named_head(name: str, config: dict[str, Any]) -> str | None:
    """The head's address the rendered config names (an on-prem cluster's `head_ip`); None
    where the head is found once launched (a cloud's, a KubeRay head pod)."""
    site = RAY_UP.get(name)
    return site.head_address(config) if site is not None else None


def most_nodes(config: dict[str, Any]) -> int:
    """The most nodes a validated Ray config's cluster can have at once: the head, and the
    workers its limits let the autoscaler add (each node type's max_workers within the
    cluster's; on-prem the listed hosts; Ray's default node types where the file names none),
    counted as the price's worst case counts them (`cost.cluster_price`): workers of the head's
    own type count where that type sets max_workers."""
    from .base import node_types, worst_case

    layout = get(str((config.get("provider") or {}).get("type"))).price_layout(config)
    head = layout.get("head_node_type")
    workers = {name: node_type for name, node_type in node_types(layout)
               if name != head or int(node_type.get("max_workers") or 0) > 0}
    cap = layout.get("max_workers")
    if not isinstance(cap, int):   # KubeRay: each worker group's maxReplicas, no cluster-wide cap
        cap = sum(max(int(t.get("max_workers") or 0), int(t.get("min_workers") or 0))
                  for t in workers.values())
    counted = worst_case({"max_workers": cap, "available_node_types": workers},
                         lambda name, node_type: "all", lambda name, node_type: 1.0)
    return 1 + int(counted.get("all", 0))


def _quiet_sdks() -> None:
    """The SDKs log retries and credential-chain failures as warnings; with no logging set up
    those would reach the terminal. Preflight reports them as results instead."""
    import logging

    for name in ("azure", "botocore", "boto3", "google", "kubernetes", "urllib3"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())


def check_cluster(spec: SpecWithProvider) -> list[CheckResult]:
    """Every check for one cluster spec; raises MissingDependency when its SDK is missing."""
    _quiet_sdks()
    return list(get(spec.provider).check(spec))


def failures(results: list[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.status == FAIL]


def ensure_ready(spec: SpecWithProvider) -> list[CheckResult]:
    """Run the checks; raise PreflightError naming each failure, else return the results."""
    results = check_cluster(spec)
    failed = failures(results)
    if failed:
        lines = [described(spec, result) for result in failed]
        raise PreflightError(
            f"preflight failed for {spec.name} ({len(failed)} problem"
            f"{'s' if len(failed) > 1 else ''}):\n  " + "\n  ".join(lines),
            hint="fix the cluster YAML, or run with --skip-preflight to launch anyway",
        )
    return results


def described(spec: SpecWithProvider, result: CheckResult) -> str:
    """`file:line: field: detail (hint)`: one check's result, where it points in the file."""
    where = f"{spec.path}:{result.line}" if result.line else str(spec.path)
    field = f" {result.field}:" if result.field else ""
    hint = f" ({result.hint})" if result.hint else ""
    return f"{where}:{field} {result.detail}{hint}"


def check_credentials() -> list[CheckResult]:
    """One row per provider: ok when its credentials work, warn (with how to fix) when not."""
    _quiet_sdks()
    rows = []
    for name, provider in PROVIDERS.items():
        try:
            result = provider.credentials()
        except MissingDependency as exc:
            result = CheckResult(f"{name} credentials", WARN, exc.message, exc.hint)
        if result.status == FAIL:
            result = CheckResult(result.name, WARN, result.detail, result.hint)
        rows.append(result)
    return rows
