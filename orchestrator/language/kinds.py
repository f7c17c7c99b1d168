"""Which kind of orchestrate file a parsed YAML document is, by the keys only that kind has."""
from __future__ import annotations

from typing import Any


def is_cluster_document(data: dict[str, Any]) -> bool:
    return "provider" in data or "cluster_name" in data


def is_experiment_document(data: dict[str, Any]) -> bool:
    return "trainer" in data or "train_loop_config" in data or "datasets" in data
