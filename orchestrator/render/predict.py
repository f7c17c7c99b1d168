"""A prediction request -> the Ray job `orchestrate predict` submits (`workload: predict`).

Pure, like the experiment's renderer: the request says where the run or checkpoint is, which
data to read and how, and where to write; the job (`workload.predict`) does the rest on the
cluster. The submission id comes from the content, so the same request finds the job it started
instead of predicting twice.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .. import contract
from ..contract import DatasetSection, PredictConfig
from ..util.workdir import WorkingDir
from .experiment import JobPlan, runtime_env

Checkpoint = Literal["best", "latest"]
FileFormat = Literal["parquet", "csv", "json"]


@dataclass(frozen=True)
class Settings:
    """How to predict: the command's options, as the job receives them."""
    output_format: FileFormat = "parquet"
    checkpoint: Checkpoint = "best"
    batch_size: int = 256
    workers: int = 1
    gpus: float = 0.0
    keep_columns: tuple[str, ...] | None = None
    evaluate: bool = False


@dataclass(frozen=True)
class PredictRequest:
    name: str                          # the experiment's name, or the run folder's
    source: str                        # a run or checkpoint folder: absolute, or a URI
    data: DatasetSection               # the path absolute, a URI, or relative to working_dir
    output: str                        # absolute, or a URI
    settings: Settings = Settings()


PredictPlan = JobPlan[PredictConfig]


def predict_config(request: PredictRequest) -> PredictConfig:
    settings = request.settings
    return {
        "version": contract.CONFIG_VERSION,
        "workload": "predict",
        "name": request.name,
        "source": {"path": request.source, "checkpoint": settings.checkpoint},
        "data": request.data,
        "output": {"path": request.output, "format": settings.output_format},
        "batch_size": settings.batch_size,
        "workers": settings.workers,
        "gpus": settings.gpus,
        "keep_columns": list(settings.keep_columns) if settings.keep_columns is not None else None,
        "evaluate": settings.evaluate,
    }


def render_predict(request: PredictRequest, working_dir: Path | None = None,
                   shipped: WorkingDir | None = None) -> PredictPlan:
    """`working_dir`/`shipped`: the experiment's, when the data lies inside it (the job then reads
    it as training read its datasets, on any cluster)."""
    config = predict_config(request)
    content = json.dumps(config, sort_keys=True) + (shipped.digest() if shipped else "")
    digest = hashlib.sha256(content.encode()).hexdigest()[:12]
    return JobPlan(entrypoint=contract.ENTRYPOINT,
                   runtime_env=runtime_env(contract.encode(config), working_dir, shipped),
                   config=config, submission_id=f"orchestrate-predict-{request.name}-{digest}")
