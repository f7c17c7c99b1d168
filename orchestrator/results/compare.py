"""Runs side by side (`orchestrate results RUN RUN...`) and a sweep's trials ranked
(`orchestrate results TUNE_RUN`), from the summaries and histories the runs left.

    table = comparison(summaries, histories)   # the parameters that differ; final and best metrics
    png = overlay(summaries, histories, table["params"])   # every run's curves, one plot
    ranked = trials(summary)                    # a Tune run's trials, best first
"""
from __future__ import annotations

import re
from typing import Any

from ..util.text import differing

LOWER_IS_BETTER = ("loss", "error", "rmse", "mae", "logloss")
HIGHER_IS_BETTER = ("accuracy", "auc", "f1", "precision", "recall")
# Not compared: the experiment file's hash differs whenever anything in the file does (the run
# names say the files differ; the parameters say how).
NOT_COMPARED = ("orchestrate.experiment_sha256",)
# Summaries from before the parameters named datasets as written carry the job's copy of the
# working_dir, a folder of Ray's that changes with every run: compared as the path inside it.
RAY_PACKAGE = re.compile(r"^\S*/runtime_resources/working_dir_files/_ray_pkg_[0-9a-f]+/")


def label(summary: dict[str, Any]) -> str:
    return str(summary.get("name") or summary.get("job_id") or "?")


def history_of(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's per-epoch rows, read where it wrote them ([] when that cannot be read)."""
    from ..workload import storage

    path = summary.get("history")
    if not path:
        return []
    import json

    data = storage.read_bytes(path)
    try:
        rows = json.loads(data) if data else []
    except ValueError:
        return []
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def direction(metric: str) -> str | None:
    """"min" or "max" for a metric whose name says which way is better, else None."""
    name = metric.lower()
    if name.endswith(LOWER_IS_BETTER):
        return "min"
    if name.endswith(HIGHER_IS_BETTER):
        return "max"
    return None


def best(history: list[dict[str, Any]], metric: str) -> float | None:
    way = direction(metric)
    values = [r[metric] for r in history if isinstance(r.get(metric), (int, float))]
    if way is None or not values:
        return None
    return float(min(values) if way == "min" else max(values))


def comparison(summaries: list[dict[str, Any]],
               histories: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """{"runs": names, "params": {key: values} (only those that differ), "final": {metric:
    values}, "best": {metric: values}}; values in the runs' order, None where a run has none."""
    params = [parameters(s) for s in summaries]
    finals = [s.get("metrics") or {} for s in summaries]
    metrics: list[str] = []
    for final in finals:
        metrics += [k for k, v in final.items()
                    if k not in metrics and k != "epoch" and isinstance(v, (int, float))]
    return {
        "runs": [label(s) for s in summaries],
        "params": {key: [p.get(key) for p in params] for key in differing(params)},
        "final": {m: [f.get(m) for f in finals] for m in metrics},
        "best": {m: [best(h, m) for h in histories] for m in metrics if direction(m)},
    }


def parameters(summary: dict[str, Any]) -> dict[str, Any]:
    """The run's parameters as compared (`NOT_COMPARED` left out, `RAY_PACKAGE` taken off)."""
    return {k: RAY_PACKAGE.sub("", v) if isinstance(v, str) else v
            for k, v in (summary.get("params") or {}).items() if k not in NOT_COMPARED}


def overlay(summaries: list[dict[str, Any]], histories: list[list[dict[str, Any]]],
            params: dict[str, list[Any]]) -> bytes | None:
    """Every run's curves in one PNG (`curves`)."""
    from ..workload import results

    return results.overlay(curves(summaries, histories, params),
                           " vs ".join(label(s) for s in summaries))


def curves(summaries: list[dict[str, Any]], histories: list[list[dict[str, Any]]],
           params: dict[str, list[Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each run's history by its curves' label: its name (and the parameters that differ,
    when they are few: `results.curve_label`)."""
    from ..workload import results

    curves: dict[str, list[dict[str, Any]]] = {}
    for index, (summary, history) in enumerate(zip(summaries, histories, strict=True)):
        name = results.curve_label(label(summary), {k: v[index] for k, v in params.items()
                                                    if not k.startswith("orchestrate.")})
        if name in curves:   # two runs of one name (job ids, or run folders) with the same values
            name = f"{name} #{index + 1}"
        curves[name] = history
    return curves


def trials(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """A Tune run's trials, best first by its metric (failed and unscored ones last)."""
    metric, mode = summary.get("metric"), summary.get("mode") or "min"
    found = [t for t in summary.get("trials") or [] if isinstance(t, dict)]

    def key(trial: dict[str, Any]) -> tuple[int, float]:
        value = trial.get(metric) if metric else None
        if not isinstance(value, (int, float)) or trial.get("error"):
            return (1, 0.0)
        return (0, float(value) if mode == "min" else -float(value))

    return sorted(found, key=key)
