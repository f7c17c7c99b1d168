"""What `apply` would do to a project: a pure decision over what the files ask for, what the
state records, and what the refresh found live. No I/O here.

    plan_project(desired, doc, live, partial=False) -> ProjectPlan

Clusters (cluster.plan decides each one): create, no-op, update (worker counts/autoscaling:
`ray up --no-restart`, jobs survive), restart (Ray restarts, jobs die), replace (down, then up),
delete (the file left the project). Experiments: submit, no-op (this content was submitted),
resubmit (the content changed), stop (the file left while its job runs), forget (the file left
after its job ended). Destructive: restart, replace, delete, stop, and a resubmit whose earlier
job still runs; each lists the running jobs it would interrupt.

Order: experiments that leave are stopped or forgotten first, then the clusters change (deletes
first), then experiments are submitted, so a job's cluster is there before the job and jobs are
stopped before their cluster goes. A partial plan (explicit files) never deletes anything.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .. import providers
from ..actions import GROUPS, Action
from ..cluster.plan import Recorded, plan_cluster
from ..errors import Problem, SpecError
from ..language.experiment import ExperimentSpec
from ..language.project import Budget
from ..state import UP, ClusterRecord
from ..state.document import Entry, StateDoc, address
from .cost import PlanCost, estimate, plan_cost
from .desired import Desired
from .live import RUNNING, Live

LEAVING = (Action.STOP, Action.FORGET)   # experiments whose file left the project


@dataclass(frozen=True)
class Change:
    address: str
    kind: str                           # "cluster" | "experiment"
    name: str
    file: str                           # relative to the project's root ("" if unknown)
    action: Action
    reason: str
    before: str | None = None           # the hash state records
    after: str | None = None            # the hash the file renders to
    fields: tuple[str, ...] = ()        # "~ max_workers", "+ setup_commands", ...
    resource_fields: tuple[str, ...] = ()   # a KubeRay cluster's RayCluster: "~ spec...."
    interrupts: tuple[str, ...] = ()    # running jobs this change would stop
    cluster: str | None = None          # an experiment's cluster (None: the embedded Ray)
    destructive: bool = False
    runs: tuple[str, ...] = ()          # a cluster whose file is gone: what its teardown runs
    price: dict[str, Any] | None = None  # a cluster's: `cost.ClusterCost.as_dict()`
    estimate: dict[str, Any] | None = None  # an experiment's with a time limit: `cost.estimate`

    def as_dict(self) -> dict[str, Any]:
        found = {"address": self.address, "kind": self.kind, "name": self.name,
                 "file": self.file, "action": self.action, "reason": self.reason,
                 "destructive": self.destructive, "before": self.before, "after": self.after,
                 "fields": list(self.fields), "resource_fields": list(self.resource_fields),
                 "interrupts": list(self.interrupts),
                 "cluster": self.cluster, "runs": list(self.runs)}
        if self.price is not None:
            found["price"] = self.price
        if self.estimate is not None:
            found["estimate"] = self.estimate
        return found


@dataclass(frozen=True)
class Drift:
    address: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"address": self.address, "message": self.message}


@dataclass(frozen=True)
class ProjectPlan:
    project: str
    lineage: str
    serial: int
    partial: bool
    refreshed: bool
    changes: tuple[Change, ...] = ()
    drift: tuple[Drift, ...] = ()
    project_file: str = ""              # the orchestrate.yaml planned (named in every output)
    cost: PlanCost | None = None        # the clusters' prices before and after, the budget

    @property
    def actions(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.action is not Action.NOOP)

    @property
    def destructive(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.destructive)

    def summary(self) -> dict[str, int]:
        count = dict.fromkeys(GROUPS, 0)
        for change in self.changes:
            count[change.action.group] += 1
        return count


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def what_runs(entry: Entry) -> list[str]:
    """What tearing down a recorded cluster whose file is gone would run, from its state
    entry: shown by `plan`, as data, for a person to read before --allow-destructive. The
    cluster's launch backend says it; a provider orchestrate does not know is shown as
    `ray down` would take it."""
    from .. import launch

    config = _mapping(entry.get("config"))
    kind = str(_mapping(config.get("provider")).get("type"))
    backend = launch.backend_type(kind) if kind in providers.PROVIDERS else launch.RayUp
    return backend.teardown_words(str(entry.get("name")), config, _mapping(entry.get("record")))


def _recorded(name: str, entry: Entry) -> Recorded:
    fields = {k: v for k, v in (entry.get("record") or {}).items()
              if k in {f.name for f in dataclasses.fields(ClusterRecord)}}
    record = ClusterRecord(name=name, provider=entry.get("provider", ""),
                           file=entry.get("file", ""), config_hash=entry.get("hash", ""),
                           **fields)
    return Recorded(record, entry.get("config"))


def _cluster_changes(desired: dict[str, Desired], doc: StateDoc, live: Live,
                     partial: bool) -> tuple[list[Change], list[Drift]]:
    changes: list[Change] = []
    drift: list[Drift] = []
    recorded = doc.entries("cluster")
    for name in sorted(set(desired) | (set() if partial else set(recorded))):
        item, entry = desired.get(name), recorded.get(name)
        where = address("cluster", name)
        seen = live.clusters.get(name)
        health = seen.health if seen else None
        asked = live.refreshed and (seen is None or seen.asked)
        if entry is not None and live.refreshed and (entry.get("record") or {}).get("state") == UP:
            if seen is not None and seen.note:
                drift.append(Drift(where, seen.note))
            if seen is not None and not seen.asked:
                drift.append(Drift(where, f"not checked: {seen.error}"))
            elif health is None:
                drift.append(Drift(where, f"recorded as up, but {seen.error if seen else 'not asked'}"))
        elif entry is not None and (entry.get("record") or {}).get("state") != UP:
            record = entry.get("record") or {}
            drift.append(Drift(where, f"the last operation left it {record.get('state')}"
                                      + (f": {record['message']}" if record.get("message") else "")))
        rendered = None
        if item is not None:
            assert item.rendered is not None and item.config is not None
            rendered = dataclasses.replace(item.rendered, config=item.config)  # normalised
        plan = plan_cluster(rendered, _recorded(name, entry) if entry else None, health,
                            asked=asked)
        action = plan.action
        if rendered is not None and health is not None and action is Action.NOOP and \
                health.nodes_alive < rendered.expected_nodes:
            drift.append(Drift(where, f"{health.nodes_alive} of {rendered.expected_nodes} "
                                      f"nodes alive"))
        destructive = action.destructive
        reason = "the file is no longer in the project" if action is Action.DESTROY \
            else plan.reason
        if destructive and seen is not None and not seen.asked:
            reason += "; which jobs it runs is unknown (not checked)"
        changes.append(Change(
            where, "cluster", name, item.file if item else entry.get("file", "") if entry else "",
            action, reason,
            before=entry.get("hash") if entry else None, after=item.hash if item else None,
            fields=plan.changes, resource_fields=plan.resource_changes, destructive=destructive,
            interrupts=tuple(seen.running()) if destructive and seen else (),
            runs=tuple(what_runs(entry)) if item is None and entry is not None else ()))
    return changes, drift


def _experiment_changes(desired: dict[str, Desired], doc: StateDoc, live: Live,
                        partial: bool) -> tuple[list[Change], list[Drift]]:
    changes: list[Change] = []
    drift: list[Drift] = []
    recorded = doc.entries("experiment")
    for name in sorted(set(desired) | (set() if partial else set(recorded))):
        item, entry = desired.get(name), recorded.get(name)
        where = address("experiment", name)
        job = (entry or {}).get("job_id")
        cluster = item.cluster if item else (entry or {}).get("cluster")
        status = live.job_status((entry or {}).get("cluster"), job) if job and live.refreshed \
            else None
        if status == "MISSING":
            drift.append(Drift(where, f"job {job} is no longer in its Ray's job table"))
        running = status in RUNNING if status else \
            (entry or {}).get("status") in (*RUNNING, "SUBMITTED")
        base: dict[str, Any] = {"before": (entry or {}).get("hash"),
                                "after": item.hash if item else None, "cluster": cluster,
                                "file": item.file if item else (entry or {}).get("file", "")}
        if item is None:
            assert entry is not None
            if running:
                changes.append(Change(where, "experiment", name, action=Action.STOP,
                                      reason=f"the file is no longer in the project; job {job} "
                                             f"is {status or 'recorded as running'}",
                                      interrupts=(job,) if job else (), destructive=True, **base))
            else:
                changes.append(Change(where, "experiment", name, action=Action.FORGET,
                                      reason="the file is no longer in the project; job "
                                             f"{job} ended ({status or entry.get('status')})",
                                      **base))
        elif entry is None:
            changes.append(Change(where, "experiment", name, action=Action.SUBMIT,
                                  reason="not submitted yet", **base))
        elif entry.get("hash") == item.hash:
            changes.append(Change(where, "experiment", name, action=Action.NOOP,
                                  reason=f"submitted as {job} ({status or entry.get('status')})",
                                  **base))
        else:
            interrupts = (job,) if running and job else ()
            changes.append(Change(where, "experiment", name, action=Action.RESUBMIT,
                                  reason="the experiment changed since it was submitted"
                                         + (f"; job {job} is stopped first" if interrupts else ""),
                                  interrupts=interrupts, destructive=bool(interrupts), **base))
    return changes, drift


def _check_clusters(experiments: dict[str, Desired], clusters: dict[str, Desired],
                    doc: StateDoc) -> None:
    known = set(clusters) | set(doc.entries("cluster"))
    problems = [Problem(item.file, f"experiment {item.name!r} runs on cluster {item.cluster!r}, "
                                   f"which is neither among the files planned nor in the state",
                        line=1, field="cluster",
                        hint="plan the cluster's file too (it must be one of the project's "
                             "files), or apply it first")
                for item in experiments.values() if item.cluster and item.cluster not in known]
    if problems:
        raise SpecError(problems)


def _priced(changes: list[Change], clusters: dict[str, Desired], doc: StateDoc,
            budget: Budget | None) -> tuple[list[Change], PlanCost]:
    """Each cluster change with its price before (the state's record: shown, not trusted) and
    after (its file); the plan's cost, with the clusters the plan leaves alone (a partial
    plan's others) counted in the project's total. The budget judges every cluster the plan
    launches (creates or changes) by its file (`cost.over_budget`)."""
    recorded = doc.entries("cluster")
    rows: list[tuple[str, bool, dict[str, Any] | None, dict[str, Any] | None]] = []
    for change in changes:
        entry, item = recorded.get(change.name), clusters.get(change.name)
        before = _mapping(entry.get("config")) or None if entry else None
        launched = item is not None and change.action is not Action.NOOP
        rows.append((change.address, launched, before, item.config if item else None))
    planned = {c.name for c in changes}
    for name, entry in sorted(recorded.items()):
        if name not in planned:
            config = _mapping(entry.get("config")) or None
            rows.append((address("cluster", name), False, config, config))
    cost = plan_cost(rows, budget)
    priced = []
    for change in changes:
        found = cost.of(change.address)
        priced.append(dataclasses.replace(change, price=found.as_dict() if found else None))
    return priced, cost


def _estimated(change: Change, item: Desired | None, cost: PlanCost) -> Change:
    """An experiment to submit that states a time limit, on a cluster: what it may cost."""
    if change.action not in (Action.SUBMIT, Action.RESUBMIT) or item is None or \
            not change.cluster or not isinstance(item.spec, ExperimentSpec):
        return change
    found = estimate(item.spec.document, cost.of(address("cluster", change.cluster)))
    return dataclasses.replace(change, estimate=found) if found else change


def plan_project(desired: list[Desired], doc: StateDoc, live: Live, *,
                 partial: bool = False, budget: Budget | None = None) -> ProjectPlan:
    clusters = {d.name: d for d in desired if d.kind == "cluster"}
    experiments = {d.name: d for d in desired if d.kind == "experiment"}
    _check_clusters(experiments, clusters, doc)
    cluster_changes, cluster_drift = _cluster_changes(clusters, doc, live, partial)
    cluster_changes, cost = _priced(cluster_changes, clusters, doc, budget)
    experiment_changes, experiment_drift = _experiment_changes(experiments, doc, live, partial)
    leaving = [c for c in experiment_changes if c.action in LEAVING]
    coming = [_estimated(c, experiments.get(c.name), cost) for c in experiment_changes
              if c.action not in LEAVING]
    cluster_changes.sort(key=lambda c: (c.action is not Action.DESTROY, c.name))
    return ProjectPlan(doc.project, doc.lineage, doc.serial, partial, live.refreshed,
                       tuple(leaving + cluster_changes + coming),
                       tuple(cluster_drift + experiment_drift), cost=cost)

