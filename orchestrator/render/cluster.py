"""ClusterSpec -> the exact Ray cluster config that `ray up` receives.

Pure: the same spec and token path always give the same result. The token itself never appears,
only the path of the local file holding it (mounted onto every node by Ray's file_mounts).
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import providers
from ..language.cluster import ClusterSpec
from .harden import Dashboard, harden_ray_config

# orchestrate's code that runs on the head outside jobs (orchestrator/head), mounted where the
# start command below runs it from, and the watcher it starts after `ray start`.
HEAD_SOURCE = str(Path(__file__).resolve().parent.parent / "head")
REMOTE_HOME = "~/.orchestrate"
REMOTE_HEAD = f"{REMOTE_HOME}/head"
# Started on every head, with the Python that runs `ray` (the `ray` script's first line names
# it; for a long path pip writes `#!/bin/sh` there and an exec line after: then the `python`
# beside the script, as in a venv or conda's bin), detached (nohup, `setsid -f`, no terminal
# or pipe held), so Ray's launcher does not wait for it and it outlives the SSH session.
# `-f`: without it setsid, not a group leader there, execs in place and the shell that
# started it waits for the watcher for ever. It sleeps while the config has no autostop, so
# adding or removing `autostop:` is an in-place change; one instance per head (it holds a
# lock).
WATCHER_START = (
    f"cd {REMOTE_HOME} && RAY_BIN=\"$(command -v ray)\" && "
    "PY=\"$(head -n 1 \"$RAY_BIN\" | cut -c 3-)\" && "
    "case \"$PY\" in *python*) ;; *) PY=\"$(dirname \"$RAY_BIN\")/python\" ;; esac && "
    "nohup setsid -f $PY -m head.autostop >> autostop.log 2>&1 < /dev/null &")


@dataclass(frozen=True)
class RenderedCluster:
    """What `ray up` gets (`config`), and what orchestrate needs to know about it."""

    name: str
    provider: str
    file: str                      # the user's cluster YAML, absolute
    config: dict[str, Any] = field(repr=False)
    dashboard: Dashboard
    expected_nodes: int            # the head plus the workers Ray keeps running at the least

    @property
    def config_hash(self) -> str:
        return config_hash(self.config)


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def _absolute(base: Path, value: str) -> str:
    """Relative local paths are relative to the cluster file's folder, not the caller's cwd."""
    expanded = os.path.expanduser(value)
    if os.path.isabs(expanded):
        return value
    return str((base / expanded).resolve())


def with_watcher(config: dict[str, Any], head_source: str = HEAD_SOURCE) -> dict[str, Any]:
    """The head package mounted on every node's ~/.orchestrate/head, and the autostop watcher
    started after the head's start commands."""
    watched = dict(config)
    watched["file_mounts"] = {**(config.get("file_mounts") or {}), REMOTE_HEAD: head_source}
    watched["head_start_ray_commands"] = [*(config.get("head_start_ray_commands") or []),
                                          WATCHER_START]
    return watched


def render_cluster(spec: ClusterSpec, *, token_file: str) -> RenderedCluster:
    from .. import launch

    provider = providers.get(spec.provider)
    config = copy.deepcopy(spec.document)
    if launch.Feature.RESOURCE in launch.features(spec.provider):
        return _resource(spec, config)
    base = spec.path.resolve().parent
    mounts = config.get("file_mounts")
    if mounts:
        config["file_mounts"] = {remote: _absolute(base, local) for remote, local in mounts.items()}
    auth = config.get("auth") or {}
    for key in ("ssh_private_key", "ssh_public_key"):
        if key in auth:
            auth[key] = _absolute(base, auth[key])
    hardened, dashboard = harden_ray_config(config, provider=provider, token_file=token_file)
    hardened = with_watcher(hardened)
    return RenderedCluster(name=spec.name, provider=spec.provider, file=str(spec.path.resolve()),
                           config=hardened, dashboard=dashboard,
                           expected_nodes=provider.expected_nodes(hardened))


def _resource(spec: ClusterSpec, config: dict[str, Any]) -> RenderedCluster:
    """A KubeRay cluster keeps its config in Ray's dialect (what plans and records compare);
    the RayCluster is made from it (launch.kuberay.manifests), and must be one KubeRay
    accepts."""
    from ..errors import SpecError
    from ..launch.kuberay.manifests import DASHBOARD_PORT, refused

    problems = [spec.problem(spec.written_at(path), message) for path, message in refused(config)]
    if problems:
        raise SpecError(problems)
    provider = providers.get(spec.provider)
    return RenderedCluster(name=spec.name, provider=spec.provider, file=str(spec.path.resolve()),
                           config=config, dashboard=Dashboard(provider.dashboard_host(config, None),
                                                              DASHBOARD_PORT),
                           expected_nodes=provider.expected_nodes(config))
