"""What a run asks of its Ray, and its place in Ray's job queue (admission).

Ray Train's workers hold their CPUs for the whole run, while Ray Data's tasks (reading,
preprocessing, the split each worker iterates) need CPUs of their own to make progress. Started
together, runs whose workers take every CPU starve each other's data pipelines for ever (each
run's Data tasks wait for CPUs the other runs' workers hold). So each run reserves, besides its
workers' resources, one CPU for Ray Data, and runs are admitted only while the reservations of
the runs admitted fit the Ray:

- the admission is Ray's own job queue: a job submitted with entrypoint resources stays PENDING
  until Ray can place its driver. Every run asks for a share of `node:__internal_head__`, the
  resource of 1.0 that only the head node has (Ray pins its own head-only actors with 0.001 of
  it: Serve's controller, each Train run's placement-group cleaner). A run's share is its
  largest fraction of the Ray's CPUs, GPUs or other resources, times HEAD_SHARE (the part of
  the head's 1.0 that runs may hold together; the rest stays for Ray's actors). Nothing is
  added to the cluster's config, and a run waiting its turn survives the CLI (`--detach`).
- A run that can never fit fails before it is submitted (`check`): what it asks for, and what
  the Ray has.
- Inside the run, Ray Train's default DataConfig already leaves the run's own workers'
  resources out of what Ray Data plans with; the reservation keeps the CPU it needs free of
  other runs' workers.

A Tune sweep reserves the trials it runs at once (as many as fit, at most its trial count or
`max_concurrent_trials`), and is told how many (TRIALS_ENV) so it starts no more.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from ..contract import TRIALS_ENV, JobConfig

HEAD = "node:__internal_head__"   # ray._common.constants.HEAD_NODE_RESOURCE_NAME
HEAD_SHARE = 0.9
DATA_CPUS = 1.0                   # reserved per run (per trial) for Ray Data's tasks
NEEDS_KEY = "orchestrate_needs"   # the job's metadata: what it asked for, as text
SHARE_KEY = "orchestrate_share"   # the job's metadata: its share of HEAD


@dataclass(frozen=True)
class Needs:
    """One run's (one trial's) reservation: its workers and Ray Data's CPU."""

    workers: int
    per_worker: dict[str, float]
    data_cpus: float = DATA_CPUS
    trials: int | None = None        # a sweep: how many trials in all (None: unknown, or none)
    trials_cap: int | None = None    # a sweep's max_concurrent_trials, if set

    @property
    def one(self) -> dict[str, float]:
        """What one run (one trial) reserves, by resource."""
        total = {name: amount * self.workers for name, amount in self.per_worker.items()
                 if amount > 0}
        total["CPU"] = total.get("CPU", 0.0) + self.data_cpus
        return total

    def text(self, at_once: int = 1) -> str:
        """'3 CPUs (2 workers x 1 CPU + 1 CPU for Ray Data)'; a sweep's per trial."""
        one = self.one
        worker = " + ".join(_amount(v, k) for k, v in self.per_worker.items() if v > 0) or "nothing"
        total = ", ".join(_amount(v * at_once, k) for k, v in sorted(one.items(), key=_cpu_first))
        plural = "s" if self.workers != 1 else ""
        detail = f"{self.workers} worker{plural} x {worker} + {_amount(self.data_cpus, 'CPU')} " \
                 f"for Ray Data"
        if at_once > 1:
            detail = f"{at_once} trials at once, each {detail}"
        return f"{total} ({detail})"


def _cpu_first(item: tuple[str, float]) -> tuple[int, str]:
    return ({"CPU": 0, "GPU": 1}.get(item[0], 2), item[0])


def _amount(value: float, name: str) -> str:
    number = f"{value:g}"
    unit = {"CPU": "CPU", "GPU": "GPU"}.get(name, name)
    plural = "s" if unit in ("CPU", "GPU") and value != 1 else ""
    return f"{number} {unit}{plural}"


def of(config: JobConfig) -> Needs:
    """A rendered job's needs, as Ray Train's ScalingConfig reads its scaling section (no
    resources_per_worker: 1 CPU, or 1 GPU and no CPU with use_gpu)."""
    scaling = config["scaling_config"]
    workers = scaling.get("num_workers") or 1
    given = scaling.get("resources_per_worker")
    use_gpu = bool(scaling.get("use_gpu"))
    if given is None:
        per_worker: dict[str, float] = {"GPU": 1.0} if use_gpu else {"CPU": 1.0}
    else:
        per_worker = {str(k): float(v) for k, v in given.items() if v}
        if use_gpu:
            per_worker.setdefault("GPU", 1.0)
    trials = cap = None
    section = config.get("tune")
    if section:
        trials = count_trials(section.get("param_space") or {},
                              (section.get("tune_config") or {}).get("num_samples", 1))
        cap = (section.get("tune_config") or {}).get("max_concurrent_trials")
    return Needs(int(workers), per_worker, trials=trials, trials_cap=cap)


def count_trials(space: Any, num_samples: Any) -> int | None:
    """How many trials a param_space makes: num_samples times each grid's size (None: not a
    number Tune would run a known count of, e.g. num_samples -1)."""
    if not isinstance(num_samples, int) or num_samples < 1:
        return None
    grids = 1

    def walk(value: Any) -> None:
        nonlocal grids
        if isinstance(value, dict):
            if set(value) == {"grid_search"} and isinstance(value["grid_search"], list):
                grids *= max(1, len(value["grid_search"]))
                return
            for item in value.values():
                walk(item)

    walk(space)
    return num_samples * grids


@dataclass(frozen=True)
class Capacity:
    """What a Ray has in all: the resources of its alive nodes, from Ray's node table."""

    total: dict[str, float]
    label: str                       # "the embedded Ray", "cluster NAME"
    node_ips: tuple[str, ...] = ()   # the alive nodes' addresses (one per node)

    def text(self) -> str:
        shown = {k: v for k, v in self.total.items() if not k.startswith("node:")
                 and k not in ("memory", "objectStoreMemory", "object_store_memory")}
        shown.setdefault("CPU", 0.0)
        return ", ".join(_amount(v, k) for k, v in sorted(shown.items(), key=_cpu_first))

    def source(self) -> str:
        """Where the figures come from: '3 nodes alive in Ray's node table'."""
        count = len(self.node_ips)
        return f"{count} node{'s' if count != 1 else ''} alive in Ray's node table"


@dataclass(frozen=True)
class Admission:
    """How a run is submitted: its entrypoint resources, metadata and variables."""

    share: float
    at_once: int                     # trials at once (1 outside a sweep)
    asked: str                       # what it reserves, as text
    too_big: list[str] = field(default_factory=list)   # resources it asks more of than exist

    @property
    def entrypoint_resources(self) -> dict[str, float]:
        return {HEAD: self.share}

    @property
    def metadata(self) -> dict[str, str]:
        return {NEEDS_KEY: self.asked, SHARE_KEY: f"{self.share:g}"}

    @property
    def env_vars(self) -> dict[str, str]:
        return {TRIALS_ENV: str(self.at_once)}


def admit(needs: Needs, capacity: Capacity) -> Admission:
    """The run's share of the Ray: its largest fraction of any resource, times HEAD_SHARE
    (rounded down to Ray's 0.0001). `too_big` names what it asks more of than the Ray has."""
    one = needs.one
    fractions = {name: amount / capacity.total[name] if capacity.total.get(name) else math.inf
                 for name, amount in one.items()}
    per_trial = max(fractions.values(), default=0.0)
    at_once = 1
    if needs.trials is not None or needs.trials_cap is not None:
        fit = int(1 / per_trial) if 0 < per_trial <= 1 else 1
        at_once = max(1, min(fit, needs.trials or fit, needs.trials_cap or fit))
    too_big = sorted(name for name, fraction in fractions.items() if fraction > 1)
    fraction = min(1.0, per_trial * at_once)
    share = max(0.0001, math.floor(fraction * HEAD_SHARE * 10_000) / 10_000)
    return Admission(share, at_once, needs.text(at_once), too_big)


def refusal(admission: Admission, capacity: Capacity) -> str:
    """Why a run cannot fit: what it asks for, what the Ray has, and where that was read."""
    return (f"the run asks for {admission.asked}, but {capacity.label} has "
            f"{capacity.text()} in all ({capacity.source()})")


def capacity_of(nodes: list[dict[str, Any]], label: str) -> Capacity | None:
    """A Capacity from Ray's node table: its alive nodes' resources; None when none is alive."""
    from ..util.nodes import alive, totals

    up = alive(nodes)
    if not up:
        return None
    return Capacity(totals(up), label, tuple(str(node.get("node_ip") or "") for node in up))


OVERSUBSCRIBE = 4   # the embedded Ray's logical CPUs are at most this many per core


def embedded_cpus(needs: Needs, cores: int | None = None) -> int:
    """The CPUs the embedded Ray is started with for a run: the machine's cores, at least 4,
    more if the run (one trial of a sweep) needs them, up to OVERSUBSCRIBE per core."""
    cores = cores or os.cpu_count() or 1
    base = max(cores, 4)
    return min(max(base, math.ceil(needs.one.get("CPU", 0.0))), max(base, OVERSUBSCRIBE * cores))


def in_use(status: dict[str, Any] | None, capacity: Capacity | None) -> str | None:
    """'4 of 4 CPUs in use' from Ray's `/api/cluster_status`; None if it does not say, or if
    its report does not yet count every alive node of `capacity` (its CPUs differ)."""
    usage = _report(status).get("usage") or {}
    pair = usage.get("CPU")
    if not (isinstance(pair, list) and len(pair) == 2) or capacity is None \
            or pair[1] != capacity.total.get("CPU", 0.0):
        return None
    return f"{pair[0]:g} of {_amount(pair[1], 'CPU')} in use"


def waiting(status: dict[str, Any] | None) -> str | None:
    """What Ray has been asked for and cannot place yet (its resource and placement-group
    demands), as text; None when nothing waits."""
    report = _report(status)
    parts = []
    for shape, count in _pairs(report.get("resourceDemand")):
        parts.append(f"{count} x {_shape(shape)} (tasks or actors)")
    for group, count in _pairs(report.get("pgDemand")):
        bundles = ", ".join(f"{n} x {_shape(b)}" for b, n in _pairs(group.get("bundles")))
        parts.append(f"{count} placement group{'s' if count != 1 else ''} of {bundles}")
    return "; ".join(parts) or None


def _report(status: dict[str, Any] | None) -> dict[str, Any]:
    found = (((status or {}).get("data") or {}).get("clusterStatus") or {}).get("loadMetricsReport")
    return found if isinstance(found, dict) else {}


def _pairs(items: Any) -> list[tuple[dict[str, Any], int]]:
    """Ray's (dict, count) summaries, as JSON lists; anything else left out."""
    return [(item[0], int(item[1])) for item in items or []
            if isinstance(item, list) and len(item) == 2 and isinstance(item[0], dict)
            and isinstance(item[1], (int, float))] if isinstance(items, list) else []


def _shape(resources: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" if isinstance(v, (int, float)) else f"{k}: {v}"
                           for k, v in sorted(resources.items())) + "}"
