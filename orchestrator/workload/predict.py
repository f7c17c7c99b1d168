"""`workload: predict`: batch prediction with a run's checkpoint, on the cluster, with Ray Data.

The data is read like an experiment's datasets (a folder of images, `format: images`, at the
model's `image_size`, one row per file with its `path`), checked against the model card (the columns the
model needs; with `evaluate`, the label and its classes) before anything heavy starts, predicted
by `map_batches` over an actor pool whose actors each load the model once
(`compute=ActorPoolStrategy`), and written with Ray Data's writers to `<output>/predictions/`.
`<output>/predict_summary.json` records rows, seconds, rows/s, the checkpoint and, with
`evaluate`, the metrics.
"""
from __future__ import annotations

import json
import time
from typing import Any

from ..contract import PREDICT_SUMMARY, PREDICTIONS_FOLDER, DatasetSection, PredictConfig, result_line
from . import card, data, inference, storage
from .images import PATH, classes_of, image_layout, read_images
from .models import image_size


class BatchPredictor:
    """The `map_batches` class: one `inference.Predictor` per actor."""

    def __init__(self, checkpoint: str, keep: list[str], evaluate: bool, use_gpu: bool) -> None:
        self.predictor = inference.Predictor(card.load(checkpoint), keep=keep, evaluate=evaluate,
                                             use_gpu=use_gpu)

    def __call__(self, batch: Any) -> Any:
        return self.predictor(batch)


def predict(config: PredictConfig) -> dict[str, Any]:
    from ray.data import ActorPoolStrategy

    source = config["source"]
    checkpoint = card.locate(data.resolve(source["path"]), source["checkpoint"])
    loaded = card.load(checkpoint)
    model = loaded.card
    print(f"orchestrate: predicting with {checkpoint} (a {model['trainer']} model of experiment "
          f"{model['experiment']!r})", flush=True)
    output = data.resolve(config["output"]["path"])
    target = storage.join(output, PREDICTIONS_FOLDER)
    if storage.exists(target):
        raise ValueError(f"{target} already exists: give another --output, or remove it")
    dataset, columns = read(config["data"], model, config["evaluate"])
    keep = check_columns(model, columns, config)
    if config["evaluate"] and config["data"].get("format") != data.IMAGES:  # images: by `read`
        check_labels(model, dataset)
    image_only = model["image"] and loaded.preprocessor is None
    gpus = float(config.get("gpus") or 0)
    workers = pool_size(config["workers"], gpus)
    started = time.monotonic()
    predicted = dataset.map_batches(
        BatchPredictor, fn_constructor_kwargs={"checkpoint": checkpoint, "keep": keep,
                                               "evaluate": config["evaluate"], "use_gpu": gpus > 0},
        batch_size=config["batch_size"], batch_format="numpy" if image_only else "pandas",
        compute=ActorPoolStrategy(size=workers), num_gpus=gpus or None)
    metrics: dict[str, float] = {}
    if config["evaluate"]:
        predicted = predicted.materialize()
        present = [c for c in (inference.CORRECT, inference.LOSS, inference.SQUARED_ERROR)
                   if c in predicted.schema().names]
        metrics = inference.summary_metrics(model, {c: predicted.mean(c) for c in present})
        predicted = predicted.drop_columns(present)
    write(predicted, target, config["output"]["format"])
    seconds = time.monotonic() - started
    rows = count(target, config["output"]["format"])
    summary = {"name": config["name"], "status": "SUCCEEDED", "rows": rows,
               "seconds": round(seconds, 3), "rows_per_second": round(rows / max(seconds, 1e-9), 1),
               "checkpoint": checkpoint, "run": loaded.run, "experiment": model["experiment"],
               "output": target, "format": config["output"]["format"], "metrics": metrics}
    summary_uri = storage.join(output, PREDICT_SUMMARY)
    storage.write_bytes(summary_uri, json.dumps(summary, indent=2).encode())
    summary["summary"] = summary_uri
    print(result_line(summary), flush=True)
    return summary


def read(spec: DatasetSection, model: dict[str, Any], evaluate: bool) -> tuple[Any, list[str]]:
    """The data as a Ray Dataset (Ray's block count: every actor of the pool gets blocks) and
    its columns; images at the model's size, with the path of each file, and to `evaluate`
    their labels (class folders or a listing's), checked against the model's classes here."""
    if spec.get("format") != data.IMAGES:
        dataset = data.read(spec)
        return dataset, list(dataset.schema().names)
    if not model["image"]:
        raise ValueError(f"the data is a folder of images, but the model ({model['trainer']}, "
                         f"experiment {model['experiment']!r}) takes table rows")
    size = model.get("image_size") or image_size(model.get("model"))
    if not evaluate:
        return data.read({**spec, "image_size": size}), [data.IMAGE, PATH]
    label, names = model["label_column"], [str(c) for c in model["class_names"] or []]
    unseen = sorted(set(classes_of(image_layout(spec["path"]), label)) - set(names))
    if unseen:
        raise ValueError(f"the images' classes {', '.join(map(repr, unseen[:10]))} are classes "
                         f"the model never learned (its classes: {', '.join(names[:20])})")
    return read_images({**spec, "image_size": size, "classes": names}, label, names=True), \
        [data.IMAGE, label, PATH]


def pool_size(asked: int, gpus: float) -> int:
    """The actors to start: on CPU each holds a CPU, so a pool as large as the cluster would
    leave nothing to read and write with (Ray Data waits for ever); one CPU stays free."""
    import ray

    if gpus > 0:
        return asked
    if not ray.is_initialized():
        ray.init()
    cpus = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
    size = max(1, min(asked, cpus - 1))
    if size < asked:
        print(f"orchestrate: {size} prediction actor(s), not {asked}: the cluster has {cpus} CPUs "
              f"and reading and writing need one", flush=True)
    return size


def check_columns(model: dict[str, Any], columns: list[str], config: PredictConfig) -> list[str]:
    """The columns to keep; ValueError naming what the data lacks."""
    missing = [c for c in model["required_columns"] if c not in columns]
    if missing:
        raise ValueError(f"the data has no column {', '.join(repr(c) for c in missing)}, which the "
                         f"model was trained on (it has: {', '.join(columns)})")
    label = model["label_column"]
    if config["evaluate"] and label not in columns:
        raise ValueError(f"--evaluate needs the label column {label!r}, which the data lacks")
    keep = config.get("keep_columns")
    if keep is None:
        return [c for c in columns if c != data.IMAGE]
    unknown = [c for c in keep if c not in columns]
    if unknown:
        raise ValueError(f"--keep-columns: the data has no column "
                         f"{', '.join(repr(c) for c in unknown)}")
    return list(keep)


def check_labels(model: dict[str, Any], dataset: Any) -> None:
    names = model.get("class_names")
    if names is None:
        return
    seen = dataset.unique(model["label_column"])
    unseen = sorted({v.item() if hasattr(v, "item") else v for v in seen} - set(names), key=str)
    if unseen:
        raise ValueError(f"the label column {model['label_column']!r} holds "
                         f"{', '.join(repr(v) for v in unseen[:10])}, which the model never learned "
                         f"(its classes: {', '.join(repr(v) for v in names[:20])})")


def write(dataset: Any, uri: str, fmt: str) -> None:
    writers = {"parquet": dataset.write_parquet, "csv": dataset.write_csv,
               "json": dataset.write_json}
    writers[fmt](uri)


def count(uri: str, fmt: str) -> int:
    import ray.data

    readers = {"parquet": ray.data.read_parquet, "csv": ray.data.read_csv,
               "json": ray.data.read_json}
    return int(readers[fmt](uri).count())
