"""The spec language: from YAML file to validated, typed spec.

    load_cluster(path) -> ClusterSpec        (language.cluster)
    load_experiment(path) -> ExperimentSpec  (language.experiment)
    load_service(path) -> ServiceSpec        (language.service)
    load_any(path) -> any of them, told apart by their keys
    build_any(document, path) -> the same, from a document already parsed

`here=False` (validate): the cluster checks that depend on this machine are warnings.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Problem, SpecError
from ..yamlload import Document, load_file

if TYPE_CHECKING:
    from .cluster import ClusterSpec
    from .experiment import ExperimentSpec
    from .service import ServiceSpec


def kind_of(data: dict[str, Any]) -> str | None:
    from .kinds import is_cluster_document, is_experiment_document, is_service_document

    if is_cluster_document(data):
        return "cluster"
    if is_service_document(data):
        return "service"
    if is_experiment_document(data):
        return "experiment"
    return None


def build_any(doc: Document, path: Path, *, here: bool = True) -> ClusterSpec | ExperimentSpec | ServiceSpec:
    """A parsed document as the spec its keys say it is; `here` as in `load_cluster`."""
    kind = kind_of(doc.data)   # each kind's module imported only for a file of that kind
    if kind == "cluster":
        from .cluster import build_cluster
        return build_cluster(doc, path, here=here)
    if kind == "experiment":
        from .experiment import build_experiment
        return build_experiment(doc, path, here=here)
    if kind == "service":
        from .service import build_service
        return build_service(doc, path, here=here)
    raise SpecError([Problem(
        str(path), "cannot tell what this file is: a cluster file has 'cluster_name' and "
        "'provider', an experiment file has 'name' and 'trainer', a service file has 'name' and "
        "'model: {experiment | run | checkpoint}'", 1)])


def load_any(path: str | Path, *, here: bool = True) -> ClusterSpec | ExperimentSpec | ServiceSpec:
    path = Path(path)
    return build_any(load_file(path), path, here=here)
