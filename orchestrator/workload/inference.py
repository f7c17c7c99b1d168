"""Predicting with a run's checkpoint: the one code path behind `orchestrate predict` (inside Ray
Data's `map_batches`) and `orchestrate serve`.

A batch (a pandas DataFrame, or a dict of numpy arrays) goes through the fitted preprocessor,
then the features in the order the model was trained on (images normalised as in training), then
the model. The answer has the kept columns, `prediction`, and for classifiers one
`probability_<class>` column per class. With `evaluate`, also `_correct` and `_loss` (or
`_squared_error`) per row, which the caller averages.
"""
from __future__ import annotations

import math
from typing import Any

from . import trainers
from .card import Loaded

PREDICTION = "prediction"
PROBABILITY = "probability_"
CORRECT, LOSS, SQUARED_ERROR = "_correct", "_loss", "_squared_error"


def probability_columns(card: dict[str, Any]) -> list[str]:
    return [f"{PROBABILITY}{name}" for name in card.get("class_names") or []]


class Predictor:
    """Loads the model once (per Ray Data actor or Serve replica) and predicts batches."""

    def __init__(self, loaded: Loaded, *, keep: list[str] | None = None, evaluate: bool = False,
                 use_gpu: bool = False) -> None:
        self.card, self.preprocessor = loaded.card, loaded.preprocessor
        self.keep, self.evaluate = list(keep or []), evaluate
        # the model's trainer loads it, as a function of a batch (`trainers.JobTrainer.load`)
        self.scores = trainers.get(self.card["trainer"]).load(loaded.checkpoint, self.card, use_gpu)

    def __call__(self, batch: Any) -> Any:
        import numpy as np
        import pandas as pd

        frame = batch if isinstance(batch, pd.DataFrame) else None
        out: dict[str, Any] = {c: np.asarray(batch[c]) for c in self.keep}
        if self.preprocessor is not None:
            batch = self.preprocessor.transform_batch(frame if frame is not None else pd.DataFrame(
                {k: list(v) if np.ndim(v) > 1 else v for k, v in batch.items()}))
        scores = self.scores(batch)  # (n, classes) probabilities, (n,) values or class indices
        names = self.card.get("class_names")
        if names is None:
            out[PREDICTION] = scores.astype(np.float64)
        elif scores.ndim == 2:
            out[PREDICTION] = np.asarray(names)[scores.argmax(axis=1)]
            for i, column in enumerate(probability_columns(self.card)):
                out[column] = scores[:, i].astype(np.float64)
        else:
            out[PREDICTION] = np.asarray(names)[scores.astype(np.int64)]
        if self.evaluate:
            out.update(self._evaluation(np.asarray(batch[self.card["label_column"]]), scores, out))
        return pd.DataFrame(out) if frame is not None else out

    def _evaluation(self, labels: Any, scores: Any, out: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        if self.card.get("class_names") is None:
            return {SQUARED_ERROR: (out[PREDICTION] - labels.astype(np.float64)) ** 2}
        result = {CORRECT: (out[PREDICTION] == labels).astype(np.float64)}
        if scores.ndim == 2:
            index = {name: i for i, name in enumerate(self.card["class_names"])}
            rows = np.arange(len(labels))
            picked = scores[rows, [index[v.item() if hasattr(v, "item") else v] for v in labels]]
            result[LOSS] = -np.log(np.clip(picked.astype(np.float64), 1e-15, 1.0))
        return result


def summary_metrics(card: dict[str, Any], means: dict[str, float | None]) -> dict[str, float]:
    """`means`: the averages of the evaluation columns over every row."""
    if card.get("class_names") is None:
        error = means.get(SQUARED_ERROR)
        return {} if error is None else {"rmse": math.sqrt(error)}
    metrics = {"accuracy": means.get(CORRECT), "loss": means.get(LOSS)}
    return {k: v for k, v in metrics.items() if v is not None}
