"""What a plan costs: each cluster's list price per hour before and after it (with its workers at
min_workers and at max_workers), the project's total at max_workers, and the budget.

    plan_cost(clusters, budget) -> PlanCost

Pure: prices come from the catalog shipped with the package (`providers.cost`). A price the
catalog lacks is unknown, never guessed: a total that counts it is unknown too, and a budget
cannot pass a cluster the plan creates or changes whose price is unknown.

"After" is what the repository's files ask for; "before" is what the state records, which
whoever can write the state (a bucket, a shared folder) can make anything: a cluster recorded
with more or bigger workers than it has would make an over-budget change look like a saving.
So "before" is shown, for the diff, and never judged by: every cluster the plan creates or
changes (`ray up` with its file) must fit `max_cluster_hourly` at the price of what its file
asks for, and the project's total after the plan `max_hourly`; an unknown price cannot pass.
As a cost policy judges a pull request by its code, not by a state the request could write. A
plan that only deletes clusters, or changes none, is never refused.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..language.project import Budget
from ..providers.cost import money

CURRENCY = "USD"
# Where "before" comes from, said with the prices' source in every output of the plan.
BEFORE_FROM = "before: as the state records it (shown, not trusted by the budget)"


@dataclass(frozen=True)
class Hourly:
    """A cluster's list price per hour, its workers at min_workers and at max_workers."""

    at_min: float | None
    at_max: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {"at_min": _round(self.at_min), "at_max": _round(self.at_max)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Hourly | None:
        return None if data is None else cls(data.get("at_min"), data.get("at_max"))


@dataclass(frozen=True)
class ClusterCost:
    address: str
    before: Hourly | None            # None: no such cluster before the plan
    after: Hourly | None             # None: none after it (deleted)
    warnings: tuple[str, ...] = ()   # prices the catalog lacks

    @property
    def change(self) -> float | None:
        """The change at max_workers (None: unknown)."""
        before = 0.0 if self.before is None else self.before.at_max
        after = 0.0 if self.after is None else self.after.at_max
        return None if before is None or after is None else after - before

    def as_dict(self) -> dict[str, Any]:
        return {"before": self.before.as_dict() if self.before else None,
                "after": self.after.as_dict() if self.after else None,
                "change_at_max": _round(self.change), "warnings": list(self.warnings)}


@dataclass(frozen=True)
class PlanCost:
    clusters: tuple[ClusterCost, ...]   # the planned clusters, then those the plan leaves alone
    source: str                         # where the prices come from, and their date
    budget: Budget | None = None
    over: tuple[str, ...] = ()          # why the plan breaks the budget (empty: it does not)

    @property
    def before(self) -> float | None:
        return _total(c.before for c in self.clusters)

    @property
    def after(self) -> float | None:
        return _total(c.after for c in self.clusters)

    @property
    def change(self) -> float | None:
        before, after = self.before, self.after
        return None if before is None or after is None else after - before

    def of(self, address: str) -> ClusterCost | None:
        return next((c for c in self.clusters if c.address == address), None)

    def as_dict(self) -> dict[str, Any]:
        budget = None if self.budget is None else {
            "max_hourly": self.budget.max_hourly,
            "max_cluster_hourly": self.budget.max_cluster_hourly}
        return {"currency": CURRENCY, "source": self.source,
                "before_at_max": _round(self.before), "after_at_max": _round(self.after),
                "change_at_max": _round(self.change), "budget": budget,
                "over_budget": list(self.over),
                "clusters": {c.address: c.as_dict() for c in self.clusters}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanCost:
        """A saved plan's cost (its `cost`)."""
        given = data.get("budget")
        clusters: dict[str, dict[str, Any]] = data.get("clusters") or {}
        budget = None if not given else Budget(given.get("max_hourly"),
                                               given.get("max_cluster_hourly"))
        costs = tuple(ClusterCost(address, Hourly.from_dict(price.get("before")),
                                  Hourly.from_dict(price.get("after")),
                                  tuple(price.get("warnings") or ()))
                      for address, price in clusters.items())
        return cls(costs, str(data.get("source") or ""), budget,
                   tuple(data.get("over_budget") or ()))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _total(prices: Iterable[Hourly | None]) -> float | None:
    total = 0.0
    for price in prices:
        if price is None:
            continue
        if price.at_max is None:
            return None
        total += price.at_max
    return total


def signed(value: float | None) -> str:
    if value is None:
        return "unknown"
    return ("+" if value >= 0 else "-") + f"${abs(value):,.2f}/h"


def hourly_of(config: dict[str, Any] | None) -> tuple[Hourly | None, tuple[str, ...], str]:
    """A Ray config's price (None: no config), the catalog's warnings and its source. A
    recorded config is data: whatever it holds gives an unknown price, never an error."""
    if config is None:
        return None, (), ""
    from ..providers.cost import cluster_price

    try:
        price = cluster_price(config)
    except Exception as exc:  # noqa: BLE001 - a damaged record prices as unknown
        return Hourly(None, None), (f"its price cannot be worked out: {exc}",), ""
    return Hourly(price.at_min, price.at_max), tuple(price.warnings), price.source


def plan_cost(clusters: list[tuple[str, bool, dict[str, Any] | None, dict[str, Any] | None]],
              budget: Budget | None) -> PlanCost:
    """`clusters`: (address, launched, config before, config after) for every cluster the
    project has or will have; `launched` True for one the plan creates or changes, whose
    after is its file's config; False for one it deletes or leaves alone (a partial plan's
    others: before and after the same)."""
    costs: list[ClusterCost] = []
    sources: list[str] = []
    launched: set[str] = set()
    for address, is_launched, before_config, after_config in clusters:
        before, warned_before, source_before = hourly_of(before_config)
        after, warned_after, source_after = hourly_of(after_config)
        for source in (source_before, source_after):
            if source and source not in sources:
                sources.append(source)
        costs.append(ClusterCost(address, before, after,
                                 tuple(dict.fromkeys(warned_after or warned_before))))
        if is_launched:
            launched.add(address)
    if any(c.before is not None for c in costs):
        sources.append(BEFORE_FROM)
    cost = PlanCost(tuple(costs), "; ".join(sources), budget)
    return PlanCost(cost.clusters, cost.source, budget, over_budget(cost, launched))


def _recorded_higher(item: ClusterCost) -> str:
    """A note for a cluster the state records as dearer than its file now asks for."""
    before, after = item.before, item.after
    if before is None or before.at_max is None or after is None or after.at_max is None or \
            before.at_max <= after.at_max + 1e-9:
        return ""
    return (f" (the state records it at {money(before.at_max)} before this plan; a record "
            f"anyone who writes the state can change is no proof of a saving)")


def over_budget(cost: PlanCost, launched: set[str]) -> tuple[str, ...]:
    """Why the plan breaks the budget: every cluster it creates or changes, at the price of what
    its file asks for, whatever the state says it was before; then the project's total after
    the plan. A plan that launches nothing always passes."""
    budget = cost.budget
    judged = [c for c in cost.clusters if c.address in launched and c.after is not None]
    if budget is None or not judged:
        return ()
    over: list[str] = []
    for item in judged:
        assert item.after is not None
        if item.after.at_max is None:
            over.append(f"{item.address}: its price is unknown, so the budget cannot be checked"
                        + (f" ({item.warnings[0]})" if item.warnings else ""))
        elif budget.max_cluster_hourly is not None and \
                item.after.at_max > budget.max_cluster_hourly + 1e-9:
            over.append(f"{item.address} costs {money(item.after.at_max)} at max_workers, over "
                        f"the budget's max_cluster_hourly of {money(budget.max_cluster_hourly)}"
                        + _recorded_higher(item))
    if budget.max_hourly is not None:
        total = cost.after
        if total is None:
            unknown = [c.address for c in cost.clusters
                       if c.after is not None and c.after.at_max is None]
            over.append(f"the project's total is unknown ({', '.join(unknown)}: price unknown), "
                        f"so max_hourly cannot be checked")
        elif total > budget.max_hourly + 1e-9:
            over.append(f"the project's clusters cost {money(total)} at max_workers after this "
                        f"plan, over the budget's max_hourly of {money(budget.max_hourly)}")
    return tuple(dict.fromkeys(over))


def time_limit(document: dict[str, Any]) -> tuple[float, str] | None:
    """The time an experiment states it runs at most (seconds) and the field that says so."""
    tune = (document.get("tune") or {}).get("tune_config") or {}
    seconds = tune.get("time_budget_s")
    return (float(seconds), "tune.tune_config.time_budget_s") if seconds else None


def estimate(document: dict[str, Any], cluster: ClusterCost | None) -> dict[str, Any] | None:
    """What a run may cost: its cluster at max_workers for the time it states (None when it
    states none); `at_most` None when the cluster's price is unknown."""
    limit = time_limit(document)
    if limit is None:
        return None
    seconds, field = limit
    hourly = cluster.after.at_max if cluster is not None and cluster.after is not None else None
    return {"at_most": _round(None if hourly is None else hourly * seconds / 3600),
            "hours": round(seconds / 3600, 4), "field": field,
            "cluster": cluster.address if cluster is not None else None}
