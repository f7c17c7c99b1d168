"""Cluster YAML -> ClusterSpec: Ray's cluster-launcher dialect, checked strictly.

Order: parse (line-aware) -> what Ray drops before validating (empty legacy keys) -> removed Ray
fields -> JSON schema (Ray's, tightened) -> shorthand expansion -> the semantic checks Ray's
schema skips, on the file laid over Ray's defaults as `ray up` does. Every problem is reported.

Checks that depend on the machine running them (a local file_mounts source, an SSH key file)
are errors where the cluster is launched from (`here=True`: `up`, `check`, the default) and
warnings elsewhere (`here=False`: `validate`, which a CI runner runs without ever launching).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .. import cluster_settings, providers
from ..errors import Problem, SpecError
from ..util.text import did_you_mean
from ..yamlload import Document, FieldPath, format_path, load_file
from .kinds import is_cluster_document, is_experiment_document
from .paths import holds
from .paths import local as local_path
from .schema import describe_value, load_schema, schema_problems
from .shorthand import expand_shorthand

# The hint of a machine-dependent problem that is only a warning (here=False; see the docstring).
HERE_HINT = "`up` and `check` refuse this where they run; `validate` only warns"

REMOVED_FIELDS = {
    "min_workers": "set min_workers on each entry of available_node_types instead",
    "head_node": "describe the head under available_node_types and name it in head_node_type",
    "worker_nodes": "describe workers under available_node_types (with min_workers/max_workers)",
}


@dataclass(frozen=True)
class ClusterSpec:
    """A validated cluster: `document` is always in Ray's dialect (shorthand expanded)."""

    path: Path
    name: str
    provider: str
    document: dict[str, Any] = field(repr=False)
    source: Document = field(repr=False, compare=False)
    # a path in `document` -> the path the user wrote it at (shorthand groups)
    origins: dict[FieldPath, FieldPath] = field(default_factory=dict, repr=False, compare=False)
    warnings: tuple[Problem, ...] = field(default=(), repr=False, compare=False)

    def line_of(self, path: FieldPath) -> int | None:
        """The line in the user's file where a field of `document` came from."""
        path = tuple(path)
        for length in range(len(path), -1, -1):
            origin = self.origins.get(path[:length])
            if origin is not None:
                return self.source.line_of(origin + path[length:])
        return self.source.line_of(path)

    def problem(self, path: FieldPath, message: str, hint: str | None = None) -> Problem:
        return Problem(str(self.path), message, self.line_of(path), None, format_path(path), hint)

    def written_at(self, path: FieldPath) -> FieldPath:
        """Where the user wrote a field of `document` (`workers.gpu` for a shorthand group)."""
        path = tuple(path)
        for length in range(len(path), -1, -1):
            origin = self.origins.get(path[:length])
            if origin is not None:
                return origin + path[length:]
        return path


def _provider_of(data: dict[str, Any]) -> providers.Provider | None:
    provider = data.get("provider")
    kind = provider.get("type") if isinstance(provider, dict) else None
    return providers.PROVIDERS[kind] if isinstance(kind, str) and kind in providers.PROVIDERS else None


def _warning(problem: Problem) -> Problem:
    from dataclasses import replace

    return replace(problem, severity="warning")


def ray_drops(doc: Document) -> tuple[Document, list[Problem]]:
    """The document without the keys Ray drops before validating, and a warning for each: empty
    legacy `head_node` / `worker_nodes` (Ray's translate_trivial_legacy_config), a top-level
    `min_workers: 0` where Ray pops it unread (fillout_defaults), and empty keys Ray's own
    preparation replaces for the provider (Provider.RAY_REPLACES)."""
    provider = _provider_of(doc.data)
    kept_legacy = provider.LEGACY_KEYS if provider else ()
    dropped: dict[str, str] = {}
    for key in ("head_node", "worker_nodes"):
        if key in doc.data and not doc.data[key]:
            dropped[key] = f"Ray drops an empty '{key}' (removed from Ray's cluster YAML)"
    value = doc.data.get("min_workers")
    if "min_workers" not in kept_legacy and value == 0 and not isinstance(value, bool):
        dropped["min_workers"] = "Ray ignores a top-level min_workers (removed from Ray's cluster YAML)"
    for key in provider.RAY_REPLACES if provider else ():
        if key in doc.data and not doc.data[key]:
            dropped[key] = f"Ray ignores '{key}' on provider {provider.NAME if provider else ''}"
    if not dropped:
        return doc, []
    warnings = [_warning(doc.problem((key,), f"{why}; remove it")) for key, why in dropped.items()]
    data = {key: value for key, value in doc.data.items() if key not in dropped}
    return Document(file=doc.file, data=data, lines=doc.lines), warnings


def ray_defaults(kind: str) -> dict[str, Any]:
    """What Ray's defaults.yaml gives this provider type that validation depends on (generated
    into the schema from the installed Ray by scripts/build_schemas.py)."""
    defaults: dict[str, Any] = load_schema("cluster").get("x-ray-defaults", {}).get(kind, {})
    return defaults


def _removed_fields(doc: Document) -> list[Problem]:
    provider = doc.data.get("provider")
    kind = provider.get("type") if isinstance(provider, dict) else None
    known = kind if isinstance(kind, str) and kind in providers.PROVIDERS else None
    kept = providers.PROVIDERS[known].LEGACY_KEYS if known else ()  # the schema reports others
    return [doc.problem((key,), f"'{key}' was removed from Ray's cluster YAML", hint)
            for key, hint in REMOVED_FIELDS.items() if key in doc.data and key not in kept]


# Keys of `provider` that every provider type may hold; each provider module lists its own in
# KEYS (ray/autoscaler/_private/<provider>/). Ray ignores unknown keys, so a misspelt one
# silently does nothing: close misspellings of a known key get a warning.
COMMON_PROVIDER_KEYS = ("type", "module", "use_internal_ips", "cache_stopped_nodes",
                        "disable_node_updaters", "disable_launch_config_check", "namespace")


def known_provider_keys() -> list[str]:
    keys = set(COMMON_PROVIDER_KEYS)
    for provider in providers.PROVIDERS.values():
        keys.update(provider.KEYS)
    return sorted(keys)


def provider_typos(doc: Document, data: dict[str, Any]) -> list[Problem]:
    from dataclasses import replace

    warnings = []
    own = _provider_of(data)
    first = set(COMMON_PROVIDER_KEYS) | set(own.KEYS if own else ())
    known: list[str] = []   # every provider's keys: read (importing each module) only when needed
    for key in data.get("provider") or {}:
        if key in first:
            continue
        known = known or known_provider_keys()
        hint = None if key in known else did_you_mean(key, known)
        if hint:
            problem = doc.problem(("provider", key), f"'{key}' is not a key Ray reads; it is ignored", hint)
            warnings.append(replace(problem, severity="warning"))
    return warnings


def _provider_problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    """Fields Ray needs from this provider in practice, and the provider's own checks."""
    kind = data["provider"]["type"]
    provider = providers.get(kind)
    missing = [doc.problem(("provider", key), f"missing '{key}', required for provider type {kind}")
               for key in provider.REQUIRED if data["provider"].get(key) in (None, "")]
    return missing + provider.problems(doc, data)


class _ProblemAt(Protocol):
    def __call__(self, path: FieldPath, message: str, hint: str | None = None) -> Problem: ...


def _node_type_problems(spec_doc: dict[str, Any], problem: _ProblemAt,
                        defaults: dict[str, Any]) -> list[Problem]:
    """Ray's validate_config, on the file laid over Ray's defaults as fillout_defaults does
    (top-level keys replace the defaults' whole), plus min_workers <= max_workers per type."""
    problems: list[Problem] = []
    given = "available_node_types" in spec_doc
    types = spec_doc["available_node_types"] if given else defaults.get("available_node_types", {})
    types = types if isinstance(types, dict) else {}
    head = spec_doc.get("head_node_type", defaults.get("head_node_type"))
    if given and head is None:
        problems.append(problem(("available_node_types",),
                                "available_node_types needs head_node_type to name the head's type"))
    elif isinstance(head, str) and head not in types:
        known = ", ".join(types) or "none defined"
        if "head_node_type" in spec_doc:
            problems.append(problem(("head_node_type",),
                                    f"'{head}' is not a node type in available_node_types ({known})",
                                    did_you_mean(head, types)))
        else:
            problems.append(problem(("available_node_types",),
                                    f"no head_node_type, and Ray's default head type '{head}' is not "
                                    f"in available_node_types ({known})",
                                    "set head_node_type to the node type of the head"))
    total_min = 0
    for name, node in types.items():
        low, high = node.get("min_workers", 0), node.get("max_workers")
        if isinstance(high, int) and isinstance(low, int) and low > high:
            problems.append(problem(("available_node_types", name, "min_workers"),
                                    f"min_workers ({low}) is above max_workers ({high})"))
        if isinstance(low, int):
            total_min += low
    max_workers = spec_doc.get("max_workers", defaults.get("max_workers"))
    if isinstance(max_workers, int) and total_min > max_workers:
        which = "" if "max_workers" in spec_doc else ", Ray's default when the file sets none"
        problems.append(problem(("max_workers",),
                                f"the node types' min_workers add up to {total_min}, "
                                f"above the cluster's max_workers ({max_workers}{which})"))
    return problems


def _head_type_filled(expanded: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """Ray names the head's node type from its defaults when the file does not: say so in the
    spec, so that everything after (render, plan, preflight) knows which type is the head."""
    head = defaults.get("head_node_type")
    types = expanded.get("available_node_types")
    if "head_node_type" not in expanded and isinstance(types, dict) and head in types:
        expanded["head_node_type"] = head
    return expanded


def _here(problem: Problem, here: bool) -> Problem:
    """A machine-dependent problem: an error where the cluster is launched from, else a warning."""
    if here:
        return problem
    from dataclasses import replace

    return replace(problem, severity="warning", hint=problem.hint or HERE_HINT)


def _file_mount_problems(doc: Document, data: dict[str, Any], base: Path, here: bool) -> list[Problem]:
    problems: list[Problem] = []
    for remote, local in (data.get("file_mounts") or {}).items():
        if not isinstance(local, str) or not local:
            problems.append(doc.problem(("file_mounts", remote),
                                        f"expected a local path, got {describe_value(local)}"))
        elif not _exists(base, local):
            problems.append(_here(doc.problem(("file_mounts", remote),
                                              f"local path '{local}' does not exist on this machine"),
                                  here))
    return problems


def _exists(base: Path, value: str) -> bool:
    return holds(local_path(base, value))


def _key_file_problems(doc: Document, data: dict[str, Any], base: Path, here: bool) -> list[Problem]:
    """The SSH key files the launcher reads, relative to the file's folder as `render` makes them."""
    auth = data.get("auth") or {}
    return [_here(doc.problem(("auth", key), f"'{auth[key]}' does not exist on this machine",
                              "relative paths start at the cluster file's folder"), here)
            for key in ("ssh_private_key", "ssh_public_key")
            if isinstance(auth.get(key), str) and auth[key] and not _exists(base, auth[key])]


def _docker_problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    """Ray's validate_docker_config: a container name and an image (or a head and a worker
    image) come together, or neither does."""
    docker = data.get("docker")
    if not isinstance(docker, dict):
        return []
    image = docker.get("image")
    images = image or (docker.get("head_image", image) and docker.get("worker_image", image))
    name = docker.get("container_name")
    if bool(name) == bool(images):
        return []
    missing = "image (or head_image and worker_image)" if name else "container_name"
    return [doc.problem(("docker", "image" if name else "container_name"),
                        f"docker needs {missing} too: Ray runs the nodes in a container only with "
                        "both", "or leave both out to run without docker")]


# A POSIX user name: Ray writes ssh_user into `user@host` and, with docker, into shell commands.
_SSH_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def _auth_problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    user = (data.get("auth") or {}).get("ssh_user")
    if isinstance(user, str) and not _SSH_USER.fullmatch(user):
        return [doc.problem(("auth", "ssh_user"), f"'{user}' is not a valid user name",
                            "letters, digits, '_', '.' and '-', starting with a letter or '_'")]
    return []


def _settings_problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    """orchestrate's own keys: `metadata.orchestrate` is where loading puts them, never the
    user; a host's price is known only where the hosts are fixed (on-prem); the storage's URI
    carries no secret."""
    problems = []
    metadata = data.get("metadata")
    if isinstance(metadata, dict) and cluster_settings.KEY in metadata:
        problems.append(doc.problem(
            ("metadata", cluster_settings.KEY),
            f"'metadata.{cluster_settings.KEY}' is orchestrate's own: it is filled from the "
            "top-level keys " + ", ".join(cluster_settings.OWN_KEYS),
            "write those keys at the top level of the file instead"))
    provider = providers.get(data["provider"]["type"])
    if "host_price_per_hour" in data and not provider.FIXED_HOSTS:
        problems.append(doc.problem(
            ("host_price_per_hour",),
            f"host_price_per_hour is for on-prem clusters; provider {provider.NAME} prices its "
            "nodes itself", "remove it"))
    storage = data.get("storage")
    if isinstance(storage, str):
        # imported only where a file names its storage (tests/test_cold_start.py)
        from ..util import uris

        if uris.has_credentials(storage):
            # it would travel in every job's configuration, which Ray shows to whoever lists jobs
            problems.append(doc.problem(("storage",), uris.CREDENTIALS_MESSAGE,
                                        uris.CREDENTIALS_HINT))
    docker = data.get("docker")
    if data.get("autostop") and isinstance(docker, dict) and \
            (docker.get("image") or docker.get("head_image")):
        # Ray runs the head's start commands, and so the watcher, inside the container: it
        # cannot see the host's SSH terminals, and its `ray stop` on workers reaches the hosts.
        problems.append(doc.problem(
            ("autostop",), "autostop does not work with docker yet: the watcher would run "
            "inside the head's container, blind to SSH sessions on the host, and could not "
            "stop Ray in the workers' containers", "remove autostop, or docker"))
    return problems


def _settings_moved(expanded: dict[str, Any],
                    origins: dict[FieldPath, FieldPath]) -> dict[str, Any]:
    """The top-level own keys moved under `metadata.orchestrate` (Ray's free-form field), each
    remembering the line it was written at."""
    own = {key: expanded.pop(key) for key in cluster_settings.OWN_KEYS if key in expanded}
    if own:
        metadata = dict(expanded.get("metadata") or {})
        metadata[cluster_settings.KEY] = own
        expanded["metadata"] = metadata
        for key in own:
            origins[("metadata", cluster_settings.KEY, key)] = (key,)
    return expanded


def build_cluster(doc: Document, path: Path, *, here: bool = True) -> ClusterSpec:
    """Validate a parsed document and build the spec; raises SpecError with every problem.

    `here`: is the cluster launched from this machine (machine-dependent checks are errors), or
    only checked (they are warnings)?"""
    doc, warnings = ray_drops(doc)
    problems = _removed_fields(doc)
    schema = [p for p in schema_problems(doc, "cluster")
              if p.field not in REMOVED_FIELDS]  # reported above with a better message
    problems += schema
    if schema:
        raise SpecError(problems + warnings)
    data = doc.data
    warnings += provider_typos(doc, data)
    found = _provider_problems(doc, data) + _auth_problems(doc, data) + \
        _docker_problems(doc, data) + _settings_problems(doc, data)
    problems += [p for p in found if p.severity != "warning"]
    warnings += [p for p in found if p.severity == "warning"]
    if problems:
        raise SpecError(_in_order(problems + warnings))
    provider = providers.get(data["provider"]["type"])
    expanded, origins, shorthand_problems = expand_shorthand(copy.deepcopy(data), doc)
    problems += shorthand_problems
    expanded = _settings_moved(expanded, origins)
    defaults = ray_defaults(provider.NAME)
    if "available_node_types" not in provider.RAY_REPLACES:
        expanded = _head_type_filled(expanded, defaults)
    base = path.parent
    machine = _file_mount_problems(doc, data, base, here) + _key_file_problems(doc, data, base, here)
    problems += [p for p in machine if p.severity != "warning"]
    warnings += [p for p in machine if p.severity == "warning"]
    spec = ClusterSpec(path=path, name=data["cluster_name"], provider=data["provider"]["type"],
                       document=expanded, source=doc, origins=origins,
                       warnings=tuple(_in_order(warnings)))
    if "available_node_types" not in provider.RAY_REPLACES:
        problems += _node_type_problems(expanded, spec.problem, defaults)
    if problems:
        raise SpecError(_in_order(problems + warnings))
    return spec


def _in_order(problems: list[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: (p.line or 0, p.field, p.message))


def load_cluster(path: str | Path, *, here: bool = True) -> ClusterSpec:
    """Load and validate a cluster file. `here=False` when it is only checked, not launched from
    this machine (`validate`): machine-dependent checks are then warnings."""
    path = Path(path)
    doc = load_file(path)
    if not is_cluster_document(doc.data) and is_experiment_document(doc.data):
        raise SpecError([Problem(
            str(path), "this is an experiment file, not a cluster file", 1,
            hint="a cluster file has 'cluster_name' and 'provider'; experiments are run with "
                 "`orchestrate run`")])
    return build_cluster(doc, path, here=here)
