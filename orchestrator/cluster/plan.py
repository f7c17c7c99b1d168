"""What `up` (and later `apply`) must do to a cluster: a pure decision over three inputs.

    plan_cluster(desired, recorded, live) -> ClusterPlan

- desired:  what the file renders to (None: the file is gone, or `down`)
- recorded: what state says was last handed to Ray (None: never launched from here)
- live:     what the cluster answered just now (None: not asked, or it did not answer)

A change lists the config's changed fields (Ray's dialect, dotted); for a KubeRay cluster also
those of the RayCluster it renders to (`resource_changes`), which is what the API server gets.

No I/O here; `orchestrator.cluster.apply` carries a plan out. The actions:

    create    nothing is running that we launched: `ray up`
    no-op     live, and the rendered config is what Ray already has
    update    only worker counts/autoscaling or orchestrate's own settings (autostop, archive,
              prices) changed: `ray up --no-restart` (jobs survive)
    restart   anything else changed (or the cluster stopped answering): `ray up`, Ray restarts
    replace   where the cluster lives changed (provider, region, head node): `down`, then `up`
    destroy   no longer wanted: `ray down` (shown as "delete")

The words, past tenses and plan marks of the actions are `orchestrator.actions.Action`'s.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from .. import providers
from ..actions import Action
from ..render.cluster import RenderedCluster
from ..state import UP, ClusterRecord

if TYPE_CHECKING:  # the type only: importing health brings the HTTP client
    from .health import Health

Config = dict[str, Any]


# Changes `ray up --no-restart` applies without restarting Ray (running jobs survive): the head's
# autoscaler picks up scaling from the new bootstrap config, and file mounts are synced again.
# Each provider adds its own (`Provider.SCALING_FIELDS`: the on-prem worker list).
IN_PLACE_FIELDS = (
    "max_workers",
    "min_workers",
    "upscaling_speed",
    "idle_timeout_minutes",
    "available_node_types.*.min_workers",
    "available_node_types.*.max_workers",
    # Where this machine keeps the token (it moved to secrets/); the nodes get the same token.
    "file_mounts.~/.ray/auth_token",
    # orchestrate's own settings (autostop, archive, prices: cluster_settings), which the head's
    # watcher reads again from the synced bootstrap config, and where its code comes from here.
    "metadata.orchestrate",
    "metadata.orchestrate.*",
    "file_mounts.~/.orchestrate/head",
)

# Changes that move the cluster or its head everywhere; each provider adds its own fields
# (`Provider.REPLACE_FIELDS`: region, zone, project, head address ...).
REPLACE_FIELDS = ("provider.type", "head_node_type")


@dataclass(frozen=True)
class Recorded:
    record: ClusterRecord
    config: Config | None = field(default=None, repr=False)  # None: missing or damaged


@dataclass(frozen=True)
class ClusterPlan:
    name: str
    action: Action
    reason: str
    changes: tuple[str, ...] = ()       # "+ field", "- field", "~ field", in field order
    resource_changes: tuple[str, ...] = ()   # the same of the RayCluster (a KubeRay cluster)
    jobs_survive: bool = True           # running jobs keep running through the action
    live: Health | None = None
    was_up: bool = False                # the record says the last `up` succeeded

    @property
    def destructive(self) -> bool:
        return self.action.destructive

    @property
    def needs_confirmation(self) -> bool:
        """Destructive to a cluster that answers, or that was up and no longer answers (it may
        be running jobs all the same: a refused token or a broken forward looks the same)."""
        return self.destructive and (self.live is not None or self.was_up)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "action": self.action.value, "reason": self.reason,
                "changes": list(self.changes),
                "resource_changes": list(self.resource_changes),
                "jobs_survive": self.jobs_survive,
                "destructive": self.destructive}


def plan_cluster(desired: RenderedCluster | None, recorded: Recorded | None,
                 live: Health | None, *, asked: bool = True) -> ClusterPlan:
    """`asked` False: the cluster was not asked (`plan --refresh=false`); a cluster recorded
    as up is taken to be up."""
    plan = _decide(desired, recorded, live, asked=asked)
    if plan.changes and desired is not None and recorded is not None and \
            recorded.config is not None and recorded.record.provider == desired.provider:
        plan = dataclasses.replace(plan, resource_changes=tuple(
            resource_diff(recorded.config, desired.config, desired.provider)))
    return plan


def _decide(desired: RenderedCluster | None, recorded: Recorded | None,
            live: Health | None, *, asked: bool) -> ClusterPlan:
    was_up = recorded is not None and recorded.record.state == UP
    if desired is None:
        if recorded is None:
            return ClusterPlan("", Action.NOOP, "not recorded, not wanted")
        return ClusterPlan(recorded.record.name, Action.DESTROY, "no longer wanted",
                           jobs_survive=False, live=live, was_up=was_up)
    name = desired.name
    if recorded is None:
        return ClusterPlan(name, Action.CREATE, "not launched yet")
    record = recorded.record
    changes = tuple(diff(recorded.config, desired.config)) if recorded.config is not None else ()
    replaced = replace_fields(changes, desired, recorded)
    if replaced:  # down with the recorded config (it may have left nodes), then up
        return ClusterPlan(name, Action.REPLACE, f"{', '.join(replaced)} changed: a new cluster",
                           changes, jobs_survive=False, live=live, was_up=was_up)
    if not was_up:
        return ClusterPlan(name, Action.CREATE, f"the last operation left it {record.state}",
                           changes)
    if live is None and asked:
        return ClusterPlan(name, Action.RESTART, "recorded as up, but it does not answer",
                           changes, jobs_survive=False, was_up=True)
    if record.config_hash == desired.config_hash:
        return ClusterPlan(name, Action.NOOP, "up and unchanged", live=live, was_up=True)
    if only_scaling(changes, desired.provider):
        return ClusterPlan(name, Action.UPDATE,
                           "only worker counts, autoscaling or orchestrate's settings changed",
                           changes, live=live, was_up=True)
    reason = "the configuration changed" if changes else \
        "the recorded configuration is missing or damaged"
    return ClusterPlan(name, Action.RESTART, reason, changes, jobs_survive=False, live=live,
                       was_up=True)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def diff(old: Config, new: Config) -> list[str]:
    """Dotted field names that were added, removed or changed, in order."""
    before, after = _flatten(old), _flatten(new)
    return _marked(before, after, sorted(set(before) | set(after)), str)


def _marked(before: dict[Any, Any], after: dict[Any, Any], keys: list[Any],
            shown: Any) -> list[str]:
    """"+ key", "- key", "~ key" for the keys added, removed or changed, in `keys`' order."""
    lines = []
    for key in keys:
        if key not in before:
            lines.append(f"+ {shown(key)}")
        elif key not in after:
            lines.append(f"- {shown(key)}")
        elif before[key] != after[key]:
            lines.append(f"~ {shown(key)}")
    return lines


def resource_diff(old: Config, new: Config, provider: str) -> list[str]:
    """A KubeRay cluster's change as the RayCluster's changed fields, in field order
    ("~ spec.workerGroupSpecs[0].maxReplicas"); none for other clusters, or when the recorded
    config no longer renders (state is data: it may be old or damaged)."""
    from .. import launch

    if launch.Feature.RESOURCE not in launch.features(provider):
        return []
    from ..launch.kuberay.manifests import dotted, ray_cluster

    try:
        before = _leaves(ray_cluster(old))
    except (KeyError, TypeError, ValueError, AttributeError):
        return []
    after = _leaves(ray_cluster(new))
    paths = sorted(set(before) | set(after),
                   key=lambda p: [(0, k, "") if isinstance(k, int) else (1, 0, k) for k in p])
    return _marked(before, after, paths, dotted)


def _leaves(value: Any, path: tuple[str | int, ...] = ()) -> dict[tuple[str | int, ...], Any]:
    """Every leaf of a resource by its path, list items by their index."""
    if isinstance(value, dict) and value:
        items: list[tuple[str | int, Any]] = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list) and value:
        items = list(enumerate(value))
    else:
        return {path: value}
    found: dict[tuple[str | int, ...], Any] = {}
    for key, item in items:
        found.update(_leaves(item, (*path, key)))
    return found


def _fields(changes: tuple[str, ...] | list[str]) -> list[str]:
    return [line[2:] for line in changes]


def only_scaling(changes: tuple[str, ...] | list[str], provider: str) -> bool:
    patterns = IN_PLACE_FIELDS + providers.get(provider).SCALING_FIELDS
    fields = _fields(changes)
    return bool(fields) and all(any(fnmatchcase(f, p) for p in patterns) for f in fields)


def replace_fields(changes: tuple[str, ...], desired: RenderedCluster,
                   recorded: Recorded) -> list[str]:
    """The changed fields that need a new cluster (sorted, distinct)."""
    if recorded.record.provider != desired.provider:
        return ["provider.type"]  # even when the recorded config is lost: the old nodes stay
    if recorded.config is None:
        return []  # we cannot tell what changed
    patterns = list(REPLACE_FIELDS) + list(providers.get(desired.provider).REPLACE_FIELDS)
    head = desired.config.get("head_node_type")
    if head:
        patterns.append(f"available_node_types.{head}.node_config")
        patterns.append(f"available_node_types.{head}.node_config.*")
    found = {f for f in _fields(changes) for p in patterns
             if fnmatchcase(f, p) or fnmatchcase(f, p + ".*")}
    return sorted(found)
