"""The trainers a job can run: one module each (`base.JobTrainer`), one explicit registry.

    get(name) -> JobTrainer      the module for a config's or a model card's `trainer`
    names()                      the registered names (the client's registry has the same ones)

Adding a trainer is one module here satisfying `base.JobTrainer`, its client module in
`orchestrator/trainers/`, and a line in each registry. The modules import their framework only
inside their functions, so importing this is cheap.
"""
from __future__ import annotations

from . import lightgbm, tensorflow, torch, xgboost
from .base import JobTrainer, Made, Scores

JOB_TRAINERS: dict[str, JobTrainer] = {torch.NAME: torch, xgboost.NAME: xgboost,
                                       lightgbm.NAME: lightgbm, tensorflow.NAME: tensorflow}

__all__ = ["JOB_TRAINERS", "JobTrainer", "Made", "Scores", "get", "names"]


def get(name: str) -> JobTrainer:
    """The trainer module for `name`; ValueError for a name this orchestrate does not know (a
    config or a model card from another version)."""
    try:
        return JOB_TRAINERS[name]
    except KeyError:
        raise ValueError(f"this orchestrate has no trainer {name!r} (it has "
                         f"{', '.join(JOB_TRAINERS)}): submit with the orchestrate version the "
                         f"cluster runs") from None


def names() -> list[str]:
    return sorted(JOB_TRAINERS)
