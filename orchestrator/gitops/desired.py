"""What the project's files ask for: each cluster and experiment file loaded, rendered, and
hashed in a form that does not depend on the machine (so two runners with different checkouts
and different ORCHESTRATE_HOMEs compute the same hash for the same file).

    read_desired(project, files, token_path) -> [Desired]    SpecError with every file's problems
    desired_cluster(project, spec, token_file) -> Desired     one cluster file, loaded already
    from_file(name, file, project, token_file) -> Desired?    a recorded cluster's file, if it is
                                                              still one of the project's

Normalising: this machine's token file becomes "${TOKEN}", where orchestrate is installed here
(the source of the head package's file mount) "${ORCHESTRATE}", the project's root folder
"${PROJECT}" and the user's home folder "${HOME}" (a `~/ray_results` expanded) in every string
of a rendered cluster config and of a job's config.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Problem, SpecError
from ..language import load_any
from ..language.cluster import ClusterSpec, load_cluster
from ..language.experiment import ExperimentSpec
from ..language.project import ProjectSpec
from ..language.service import ServiceSpec
from ..render.cluster import HEAD_SOURCE, RenderedCluster, config_hash, render_cluster
from ..state.document import address
from ..util.workdir import WorkingDir

PROJECT_MARK, TOKEN_MARK, HOME_MARK = "${PROJECT}", "${TOKEN}", "${HOME}"
HEAD_MARK = "${ORCHESTRATE}/head"


@dataclass(frozen=True)
class Desired:
    address: str                  # cluster/<name> or experiment/<name>
    kind: str                     # "cluster" | "experiment"
    name: str
    file: str                     # relative to the project's root
    hash: str                     # of the normalised rendering
    spec: ClusterSpec | ExperimentSpec = field(repr=False)
    config: dict[str, Any] | None = field(default=None, repr=False)  # a cluster's, normalised
    cluster: str | None = None    # an experiment's cluster (None: the runner's embedded Ray)
    rendered: RenderedCluster | None = field(default=None, repr=False)


def replace_strings(value: Any, swaps: list[tuple[str, str]]) -> Any:
    """`value` with every string's occurrences of each `old` replaced by `new`, in order."""
    if isinstance(value, str):
        for old, new in swaps:
            if old:
                value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {replace_strings(k, swaps): replace_strings(v, swaps) for k, v in value.items()}
    if isinstance(value, list):
        return [replace_strings(v, swaps) for v in value]
    return value


def normalise(config: dict[str, Any], root: Path, token_file: Path | str) -> dict[str, Any]:
    normalised: dict[str, Any] = replace_strings(config, _marks(root, token_file))
    return normalised


def _marks(root: Path, token_file: Path | str | None) -> list[tuple[str, str]]:
    """Longest first: the token file and the project may lie inside the home folder, the
    installed package inside the project (a checkout of orchestrate) or the home folder."""
    home = str(Path.home())
    return [(str(token_file or ""), TOKEN_MARK), (HEAD_SOURCE, HEAD_MARK),
            (str(root), PROJECT_MARK),
            (home if home != "/" else "", HOME_MARK)]


def denormalise(config: dict[str, Any], root: Path, token_file: Path | str) -> dict[str, Any]:
    """The inverse of `normalise` on this machine."""
    placed: dict[str, Any] = replace_strings(config, [(new, old) for old, new
                                                      in _marks(root, token_file)])
    return placed


class _Shipped:
    """Working-dir digests, computed once per folder and excludes within one plan (a project's
    experiments often share a folder). The project's own cluster and experiment files are left
    out: an experiment's content is in its config already, and editing or removing one file must
    not resubmit every experiment beside it."""

    def __init__(self, project_files: set[Path]) -> None:
        self.seen: dict[tuple[str, tuple[str, ...]], str] = {}
        self.project_files = project_files

    def digest(self, spec: ExperimentSpec, storage: str | None,
               walked: WorkingDir | None = None) -> str:
        """`walked`: what `ship(spec)` found already, if it was called."""
        from ..render.experiment import ship

        extra = tuple((spec.document.get("runtime_env") or {}).get("excludes") or ())
        key = (str(spec.working_dir), (*extra, str(storage)))  # what ship's excludes come from
        if key not in self.seen:
            shipped = walked or ship(spec)
            code = tuple(f for f in shipped.files
                         if shipped.root / f[0] not in self.project_files)
            self.seen[key] = dataclasses.replace(shipped, files=code).digest()
        return self.seen[key]


def desired_experiment(project: ProjectSpec, spec: ExperimentSpec,
                       walked: WorkingDir | None = None) -> Desired:
    """One experiment of the project, loaded already (`run` of a project's file), as
    `read_desired` gives it; `walked`: its working_dir as `ship(spec)` found it."""
    return _experiment(spec, project, _Shipped(set(project.files()) | {spec.path.resolve()}),
                       walked)


def _experiment(spec: ExperimentSpec, project: ProjectSpec, shipped: _Shipped,
                walked: WorkingDir | None = None) -> Desired:
    from ..render.experiment import identity, resolve_config

    resolved = resolve_config(spec)
    config = replace_strings(identity(resolved), _marks(project.root, None))
    if config.get("tracking"):   # what names the source, not what runs: no drift from it
        config["tracking"] = {k: v for k, v in config["tracking"].items() if k not in (
            "experiment_file", "experiment_sha256", "orchestrate_version")}
    cluster = spec.cluster.name if spec.cluster else None
    content = {"config": config, "cluster": cluster,
               "working_dir": shipped.digest(spec, resolved["run_config"].get("storage_path"),
                                             walked)}
    if spec.environment.public():   # packages, variables, secrets' names: never their values
        content["environment"] = spec.environment.public()
    return Desired(address("experiment", spec.name), "experiment", spec.name,
                   project.relative(spec.path), config_hash(content), spec, cluster=cluster)


def desired_cluster(project: ProjectSpec, spec: ClusterSpec, token: Path) -> Desired:
    """One cluster file of the project, loaded already: rendered with `token` as this
    machine's token file, and hashed normalised."""
    rendered = render_cluster(spec, token_file=str(token))
    config = normalise(rendered.config, project.root, token)
    return Desired(address("cluster", spec.name), "cluster", spec.name,
                   project.relative(spec.path), config_hash(config), spec, config,
                   rendered=rendered)


def from_file(name: str, file: Any, project: ProjectSpec, token: Path, *,
              here: bool = True) -> Desired | None:
    """A recorded cluster's file (`file`, as its state entry names it), loaded and rendered
    here: None when it is not one of the project's files any more, or defines another cluster.
    SpecError for a file with problems."""
    if not isinstance(file, str) or not file:
        return None
    path = (project.root / file).resolve()
    if path not in set(project.files()):
        return None
    spec = load_cluster(path, here=here)
    return desired_cluster(project, spec, token) if spec.name == name else None


def read_desired(project: ProjectSpec, files: list[Path], token_path: Callable[[str], Path],
                 project_files: set[Path] | None = None, *, here: bool = True) -> list[Desired]:
    """Load and render every file; SpecError with the problems of all of them at once, and
    with two files that claim the same address. `here`: the files' SSH keys and mounted files
    must exist on this machine (apply), or may be missing with a warning (plan)."""
    problems: list[Problem] = []
    desired: dict[str, Desired] = {}
    shipped = _Shipped((project_files if project_files is not None else set(project.files()))
                       | set(files))
    for path in files:
        try:
            spec = load_any(path, here=here)
        except SpecError as exc:
            problems += [p for p in exc.problems if p.severity != "warning"]
            continue
        if isinstance(spec, ServiceSpec):
            continue  # services are served with `orchestrate serve`, not planned (yet)
        if isinstance(spec, ClusterSpec):
            item = desired_cluster(project, spec, token_path(spec.name))
        else:
            item = _experiment(spec, project, shipped)
        other = desired.get(item.address)
        if other is not None:
            problems.append(Problem(str(path), f"{item.kind} {item.name!r} is also defined in "
                                               f"{other.file}", line=1,
                                    hint="names must be unique within a project"))
            continue
        desired[item.address] = item
    if problems:
        raise SpecError(problems)
    return list(desired.values())
