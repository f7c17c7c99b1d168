"""The model card: what a training run leaves beside its checkpoints so that a checkpoint alone is
enough to predict with (`orchestrate predict`, `orchestrate serve`).

`<run>/orchestrate/model.json` holds the trainer, the built-in model and its arguments, the
columns the data must have (with their kinds and the train split's first row, which the demo page
shows as an example), the features in the order the model takes them, the label column, the
class names (an images split's folder names, sorted) and an image model's `image_size`;
`<run>/orchestrate/preprocessor.bin` the preprocessor as fitted on the train split, in Ray
Data's own serialization (`Preprocessor.serialize`). Each checkpoint's
metadata (`Checkpoint.update_metadata`) names its run, so a checkpoint that moved keeps its way
back; a checkpoint still in its run's folder also finds the card there.

Loading the preprocessor is unpickling, so it happens only where the work runs (the predict
job, the Serve replica), never on the operator's machine: `read` (used by `serve` and `render`)
reads JSON only, and `load` unpickles the preprocessor only if its bytes have the SHA-256 the
run recorded in the card (`preprocessor_sha256`) when it wrote them. A card without that digest
(written before orchestrate recorded one) is refused: run the experiment again. The digest
proves the file is the one its run wrote, not that the run is honest: load only runs you (or
your pipeline) wrote.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, cast

from ..contract import CARD_VERSION, MODEL_CARD, PREPROCESSOR_FILE, RESULTS_FOLDER, JobConfig
from . import storage, trainers
from .configs import best_from_history, checkpoint_section
from .data import IMAGES, Prepared, resolve
from .models import image_size

METADATA_KEY = "orchestrate_run"  # in each checkpoint's metadata: the run folder it belongs to
CHECKPOINT_METADATA = ".metadata.json"  # Ray Train's `Checkpoint.get_metadata` file (JSON)
DIGEST_KEY = "preprocessor_sha256"      # in the card: the SHA-256 of preprocessor.bin's bytes
MODEL_FILES = tuple(t.CHECKPOINT_FILE for t in trainers.JOB_TRAINERS.values())  # each trainer's


class CardError(ValueError):
    """No usable model card, checkpoint or run where the user pointed."""


def class_names(config: JobConfig) -> list[Any] | None:
    """The classes the model can answer: an images train split's class names (the job's
    driver found them, `images.with_image_classes`), else the trainer's (indices, as it was
    trained on); None for regression."""
    train = (config.get("datasets") or {}).get("train") or {}
    if train.get("format") == IMAGES and train.get("classes"):
        return list(train["classes"])
    return trainers.get(config["trainer"]).class_names(config)


def make_card(config: JobConfig, prepared: Prepared, *, preprocessor_encoding: str | None,
              preprocessor_sha256: str | None = None) -> dict[str, Any]:
    """`prepared.columns`: the train split as read; `prepared.features`: after the
    preprocessor, in model order."""
    label = config.get("label_column") or "label"
    steps = config.get("preprocessors") or []
    used = {c for step in steps for c in (step.get("columns") or [])}
    required = [c for c in prepared.columns
                if c != label and (c in prepared.features or c in used)]
    names = class_names(config)
    example, kinds = (None, {}) if prepared.image else example_row(config, required)
    return {
        "format_version": CARD_VERSION,
        "experiment": config["name"],
        "trainer": config["trainer"],
        "model": config.get("model"),
        "input_dim": prepared.input_dim,
        "image": prepared.image,
        "image_size": image_size(config.get("model")) if prepared.image else None,
        "label_column": label,
        "required_columns": required,
        "column_kinds": kinds,
        "example": example,
        "features": prepared.features,
        "task": "classification" if names is not None else "regression",
        "class_names": names,
        "objective": (config.get("params") or {}).get("objective"),
        "preprocessor": preprocessor_encoding,
        DIGEST_KEY: preprocessor_sha256,
        "checkpoint_config": checkpoint_section(config),
    }


EXAMPLE_FORMATS = ("parquet", "csv")   # read here with pyarrow alone, as the job reads them


def kind(arrow_type: Any) -> str:
    """A column's kind as the demo page's form takes it: integer, number, boolean or string."""
    import pyarrow.types as t

    if t.is_integer(arrow_type):
        return "integer"
    if t.is_floating(arrow_type) or t.is_decimal(arrow_type):
        return "number"
    return "boolean" if t.is_boolean(arrow_type) else "string"


def example_row(config: JobConfig, columns: list[str]) -> tuple[dict[str, Any] | None,
                                                                dict[str, str]]:
    """The train split's first row (its `columns`, JSON-ready: a missing value is None) and each
    column's kind, read from the file's first batch; (None, {}) for a format or a source that
    does not give one cheaply, or whose `read_options` (a CSV's delimiter, parse options) this
    reader would not apply: it would read another row, silently. Optional: the demo page then
    shows empty fields."""
    import math

    import pyarrow
    import pyarrow.dataset

    spec = (config.get("datasets") or {}).get("train")
    if not spec or spec.get("format", "parquet") not in EXAMPLE_FORMATS \
            or spec.get("read_options"):
        return None, {}
    try:
        found = pyarrow.dataset.dataset(resolve(spec["path"]), format=spec.get("format", "parquet"))
        head = found.head(1, columns=[c for c in columns if c in found.schema.names])
    except (OSError, ValueError, pyarrow.ArrowException):   # the card is written without it
        return None, {}
    kinds = {field.name: kind(field.type) for field in head.schema}
    if head.num_rows == 0:
        return None, kinds
    def plain(value: Any) -> Any:   # JSON has no NaN, dates or bytes
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)

    return {name: plain(values[0]) for name, values in head.to_pydict().items()}, kinds


def save(run_uri: str, config: JobConfig, prepared: Prepared) -> None:
    """Write the card and the fitted preprocessor (serialized once) into the run's results
    folder."""
    folder = storage.join(run_uri, RESULTS_FOLDER)
    encoding = digest = None
    if prepared.preprocessor is not None:
        data = prepared.preprocessor.serialize()
        encoding = "text" if isinstance(data, str) else "bytes"
        written = data.encode() if isinstance(data, str) else data
        digest = hashlib.sha256(written).hexdigest()
        storage.write_bytes(storage.join(folder, PREPROCESSOR_FILE), written)
    card = make_card(config, prepared, preprocessor_encoding=encoding, preprocessor_sha256=digest)
    storage.write_bytes(storage.join(folder, MODEL_CARD), json.dumps(card, indent=2).encode())


def mark_checkpoint(checkpoint: Any, run_uri: str) -> None:
    """Name the run in a reported checkpoint's metadata (a Ray Train `Checkpoint`)."""
    checkpoint.update_metadata({METADATA_KEY: run_uri})


@dataclass(frozen=True)
class Found:
    """A checkpoint's card, read as JSON only (what the operator's machine may do)."""
    card: dict[str, Any]
    checkpoint: str                # the checkpoint folder (path or URI)
    run: str                       # the run folder the card came from


@dataclass(frozen=True)
class Loaded:
    card: dict[str, Any]
    preprocessor: Any              # fitted, or None
    checkpoint: str                # the checkpoint folder (path or URI)
    run: str                       # the run folder the card came from


def locate(path: str, which: str) -> str:
    """The checkpoint to predict with: `path` itself when it is a checkpoint, else the `best`
    (by the run's checkpoint score; the run's summary says which for a Tune sweep) or `latest`
    checkpoint of the run folder `path`."""
    own = storage.join(path, RESULTS_FOLDER)
    if any(storage.exists(storage.join(path, name)) for name in (*MODEL_FILES, ".metadata.json")):
        return path
    if not storage.exists(own):
        raise CardError(f"{path} is neither a run folder (with {RESULTS_FOLDER}/ inside) nor a "
                        f"checkpoint (with {' or '.join(MODEL_FILES)})")
    history = storage.read_history(path)
    summary = _json(storage.join(own, "summary.json")) or {}
    best = storage.uri_in(path, str(summary.get("best_checkpoint") or ""))
    if which == "best" and best and storage.exists(best):
        return best
    kept = [r["checkpoint"] for r in history if r.get("checkpoint") and storage.exists(r["checkpoint"])]
    if not kept:
        raise CardError(f"the run {path} has no checkpoint to predict with")
    if which == "latest":
        return cast(str, kept[-1])
    card = _json(storage.join(own, MODEL_CARD)) or {}
    return best_from_history(history, card.get("checkpoint_config") or {}) or cast(str, kept[-1])


def read(checkpoint_uri: str) -> Found:
    """The card of a checkpoint's run, and that run: JSON only (the checkpoint's metadata and
    the card), nothing unpickled, no Ray imported. For the operator's machine."""
    metadata = _json(storage.join(checkpoint_uri, CHECKPOINT_METADATA)) or {}
    run = metadata.get(METADATA_KEY)
    candidates = [run] if isinstance(run, str) and run else []
    candidates.append(checkpoint_uri.rstrip("/").rsplit("/", 1)[0])
    for run_uri in candidates:
        card = _json(storage.join(run_uri, RESULTS_FOLDER, MODEL_CARD))
        if card is not None:
            return Found(card, checkpoint_uri, run_uri)
    raise CardError(f"the checkpoint {checkpoint_uri} has no model card ({MODEL_CARD}) in its "
                    f"run's {RESULTS_FOLDER}/ folder: it was written by an older orchestrate, by "
                    f"a run with its own train_loop, or moved away from its run")


def load(checkpoint_uri: str) -> Loaded:
    """The card and fitted preprocessor of a checkpoint's run: only in the job or the Serve
    replica (the preprocessor is unpickled, once its digest matches the card's)."""
    found = read(checkpoint_uri)
    return Loaded(found.card, _preprocessor(found.run, found.card), checkpoint_uri, found.run)


def undigested(run_uri: str, card: dict[str, Any]) -> str | None:
    """Why the card's preprocessor will not be unpickled whatever its bytes (it records no
    digest), or None. JSON only: `serve` says it before deploying."""
    recorded = card.get(DIGEST_KEY)
    if not card.get("preprocessor") or (isinstance(recorded, str) and recorded):
        return None
    return (f"the model card of the run {run_uri} records no digest of its fitted preprocessor "
            f"({PREPROCESSOR_FILE}; orchestrate 0.2.0 and older wrote none), so it is not "
            f"unpickled: run the experiment again, or, for a run you trust, add "
            f"\"{DIGEST_KEY}\": \"<sha256sum of {PREPROCESSOR_FILE}>\" to its {MODEL_CARD}")


def _preprocessor(run_uri: str, card: dict[str, Any]) -> Any:
    encoding = card.get("preprocessor")
    if not encoding:
        return None
    problem = undigested(run_uri, card)
    if problem:
        raise CardError(problem)
    recorded = str(card[DIGEST_KEY])
    data = storage.read_bytes(storage.join(run_uri, RESULTS_FOLDER, PREPROCESSOR_FILE))
    if data is None:
        raise CardError(f"the run {run_uri} has a model card but lost its fitted preprocessor "
                        f"({PREPROCESSOR_FILE})")
    actual = hashlib.sha256(data).hexdigest()
    if actual != recorded.lower():
        raise CardError(f"the fitted preprocessor of the run {run_uri} ({PREPROCESSOR_FILE}, "
                        f"sha256 {actual[:16]}...) does not match the digest its model card "
                        f"recorded (sha256 {recorded[:16]}...): it changed after the run wrote "
                        f"it, so it is not unpickled")
    from ray.data.preprocessor import SerializablePreprocessorBase

    return SerializablePreprocessorBase.deserialize(data.decode() if encoding == "text" else data)


def _json(uri: str) -> dict[str, Any] | None:
    data = storage.read_bytes(uri)
    if data is None:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
