"""The spec language: from YAML file to validated, typed spec.

    load_cluster(path) -> ClusterSpec        (language.cluster)
    load_experiment(path) -> ExperimentSpec  (language.experiment)
    load_any(path) -> either, told apart by their keys
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Problem, SpecError
from ..yamlload import load_file

if TYPE_CHECKING:
    from .cluster import ClusterSpec
    from .experiment import ExperimentSpec


def kind_of(data: dict[str, Any]) -> str | None:
    from .cluster import is_cluster_document
    from .experiment import is_experiment_document

    if is_cluster_document(data):
        return "cluster"
    if is_experiment_document(data):
        return "experiment"
    return None


def load_any(path: str | Path) -> ClusterSpec | ExperimentSpec:
    from .cluster import build_cluster
    from .experiment import build_experiment

    path = Path(path)
    doc = load_file(path)
    kind = kind_of(doc.data)
    if kind == "cluster":
        return build_cluster(doc, path)
    if kind == "experiment":
        return build_experiment(doc, path)
    raise SpecError([Problem(
        str(path), "cannot tell what this file is: a cluster file has 'cluster_name' and "
        "'provider', an experiment file has 'name' and 'trainer'", 1)])
