"""Training: one run of the config's trainer (`fit`), or a Tune sweep over it (`tune_job`), from
the resolved configuration. The trainers themselves are `workload.trainers`."""
from __future__ import annotations

from typing import Any

from ...contract import JobConfig
from ..data import absolute_paths
from ..images import with_image_classes
from .fit import run_trainer
from .tune_job import run_tune


def train(config: JobConfig) -> dict[str, Any]:
    config = with_image_classes(absolute_paths(config))
    return run_tune(config) if config.get("tune") else run_trainer(config)
