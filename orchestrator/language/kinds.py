"""Which kind of orchestrate file a parsed YAML document is, by the keys only that kind has."""
from __future__ import annotations

from typing import Any


def is_cluster_document(data: dict[str, Any]) -> bool:
    return "provider" in data or "cluster_name" in data


def is_experiment_document(data: dict[str, Any]) -> bool:
    return "trainer" in data or "train_loop_config" in data or "datasets" in data


# Where a service's model comes from: a service file's `model` names one of these.
SOURCES = ("experiment", "run", "checkpoint")
# The project file of a GitOps repository, at its root.
PROJECT_FILE = "orchestrate.yaml"


def is_service_document(data: dict[str, Any]) -> bool:
    model = data.get("model")
    return "trainer" not in data and (
        (isinstance(model, dict) and any(k in model for k in SOURCES))
        or any(k in data for k in ("route_prefix", "replicas", "autoscaling", "auth")))
