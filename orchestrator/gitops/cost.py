"""What a plan costs: each cluster's list price per hour before and after it (with its workers at
min_workers and at max_workers), the project's total at max_workers, and the budget.

    plan_cost(clusters, unplanned, budget) -> PlanCost

Pure: prices come from the catalog shipped with the package (`providers.cost`). A price the
catalog lacks is unknown, never guessed: a total that counts it is unknown too, and a budget
cannot pass a cluster the plan creates or makes dearer whose price is unknown.

A plan is judged only when it makes a cluster dearer (creates it, or changes it to a higher or
unknown price at max_workers): then that cluster must fit `max_cluster_hourly` and the
project's total after the plan `max_hourly`; an unknown price cannot pass. A plan that lowers
the cost, or deletes, is never refused, even under a budget already broken.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..language.project import Budget
from ..providers.cost import money

CURRENCY = "USD"


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
    same_basis: bool = False         # before and after are priced from the same things

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


def hourly_of(config: dict[str, Any] | None) -> tuple[Hourly | None, tuple[str, ...], str, str]:
    """A Ray config's price (None: no config), the catalog's warnings, its source, and what it
    was read from (`ClusterPrice.basis`; "" when unknown). A recorded config is data: whatever
    it holds gives an unknown price, never an error."""
    if config is None:
        return None, (), "", ""
    from ..providers.cost import cluster_price

    try:
        price = cluster_price(config)
    except Exception as exc:  # noqa: BLE001 - a damaged record prices as unknown
        return Hourly(None, None), (f"its price cannot be worked out: {exc}",), "", ""
    return Hourly(price.at_min, price.at_max), tuple(price.warnings), price.source, price.basis


def plan_cost(clusters: list[tuple[str, bool, dict[str, Any] | None, dict[str, Any] | None]],
              budget: Budget | None) -> PlanCost:
    """`clusters`: (address, planned, config before, config after) for every cluster the
    project has or will have; `planned` False for a cluster the plan leaves alone (a partial
    plan's others), whose before and after are the same."""
    costs: list[ClusterCost] = []
    sources: list[str] = []
    planned: set[str] = set()
    for address, is_planned, before_config, after_config in clusters:
        before, warned_before, source_before, basis_before = hourly_of(before_config)
        after, warned_after, source_after, basis_after = hourly_of(after_config)
        for source in (source_before, source_after):
            if source and source not in sources:
                sources.append(source)
        costs.append(ClusterCost(address, before, after,
                                 tuple(dict.fromkeys(warned_after or warned_before)),
                                 same_basis=bool(basis_before) and basis_before == basis_after))
        if is_planned:
            planned.add(address)
    cost = PlanCost(tuple(costs), "; ".join(sources), budget)
    return PlanCost(cost.clusters, cost.source, budget, over_budget(cost, planned))


def dearer(item: ClusterCost) -> bool:
    """The plan may make this cluster cost more: it comes or changes, and its price at
    max_workers rises or cannot be compared (an unknown price counts as a rise, unless the
    change leaves everything the price is read from as it was). A cluster the plan deletes,
    or leaves at the same known price, is not dearer."""
    if item.after is None:
        return False
    if item.after.at_max is None:
        return not item.same_basis
    if item.before == item.after:
        return False
    return item.change is None or item.change > 1e-9


def over_budget(cost: PlanCost, planned: set[str]) -> tuple[str, ...]:
    """Why the plan breaks the budget: only what it makes dearer is judged, so a plan that
    lowers the cost, or touches nothing dearer, always passes."""
    budget = cost.budget
    rising = [c for c in cost.clusters if c.address in planned and dearer(c)]
    if budget is None or not rising:
        return ()
    over: list[str] = []
    for item in rising:
        assert item.after is not None
        if item.after.at_max is None:
            over.append(f"{item.address}: its price is unknown, so the budget cannot be checked"
                        + (f" ({item.warnings[0]})" if item.warnings else ""))
        elif budget.max_cluster_hourly is not None and \
                item.after.at_max > budget.max_cluster_hourly + 1e-9:
            over.append(f"{item.address} costs {money(item.after.at_max)} at max_workers, over "
                        f"the budget's max_cluster_hourly of {money(budget.max_cluster_hourly)}")
    if budget.max_hourly is not None:
        total = cost.after
        if total is None:
            unknown = [c.address for c in cost.clusters
                       if c.after is not None and c.after.at_max is None]
            over.append(f"the project's total is unknown ({', '.join(unknown)}: price unknown), "
                        f"so max_hourly cannot be checked")
        elif total > budget.max_hourly + 1e-9:
            over.append(f"the project's clusters cost {money(total)} at max_workers after this "
                        f"plan ({signed(cost.change)}), over the budget's max_hourly of "
                        f"{money(budget.max_hourly)}")
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
