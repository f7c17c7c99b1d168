"""`trainer: tensorflow`: Ray Train's TensorflowTrainer with Keras 3, the built-in models (mlp,
cnn) built in Keras, or the user's own `train_loop`.

Keras 3's `model.fit` fails under `tf.distribute.MultiWorkerMirroredStrategy` (keras-team/keras
#20585, ray-project/ray#47464), so the built-in loop is a plain step loop: `strategy.run` of a
train step whose loss is averaged over the global batch (`tf.nn.compute_average_loss`), the
Keras optimizer summing the gradients over the workers. Each worker's Ray Data shard comes as a
`tf.data.Dataset` (`to_tf`, `prepare_dataset_shard`), batched at the global batch size and
split by `strategy.experimental_distribute_dataset` (each worker keeps its whole shard: a global
batch of G rows becomes `world` steps of G / world). Per epoch: train, the validation loss and
accuracy summed over every worker, `ray.train.report` with a checkpoint: a folder holding
`model.keras` (the model with its optimizer) and `state.json` (the epoch), its metadata naming
the model file as Ray's TensorflowCheckpoint did (`_model_filename`).
"""
from __future__ import annotations

import functools
import json
import os
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from ...contract import JobConfig, ModelSection
from .. import data, models, tracking
from ..configs import data_config, scaling_config
from .base import Made, Scores, import_train_loop, network_data
from .base import network_class_names as class_names
from .base import network_metric as default_metric

NAME = "tensorflow"
CHECKPOINT_FILE = "model.keras"
MODEL_FILENAME_KEY = "_model_filename"   # ray.train.tensorflow.TensorflowCheckpoint's (deprecated)
STATE_FILE = "state.json"
# TensorFlow's C++ logging at import and per op placement, in every process that imports it
ENVIRONMENT = {"TF_CPP_MIN_LOG_LEVEL": "2"}

__all__ = ["CHECKPOINT_FILE", "ENVIRONMENT", "NAME", "build_model", "class_names",
           "default_metric", "load", "make_trainer", "train_loop"]


def make_trainer(config: JobConfig, run_config: Any) -> Made:
    """A TensorflowTrainer for the resolved config; a built-in model's run hands back its
    prepared data (for the model card)."""
    from ray.train.tensorflow import TensorflowTrainer

    prepared = network_data(config)
    if reference := config.get("train_loop"):
        loop = tracking.with_run(import_train_loop(reference), tracking.run_of(config))
        made = None   # the user's loop makes its own model: no card
    else:
        assert prepared is not None   # the client refuses a built-in model without a train split
        job = {"model": config.get("model"), "image": prepared.image,
               "input_dim": prepared.input_dim, "label": config.get("label_column") or "label",
               "splits": list(prepared.datasets)}
        loop, made = functools.partial(train_loop, job=job), prepared
    return Made(TensorflowTrainer(loop, train_loop_config=dict(config.get("train_loop_config") or {}),
                                  datasets=prepared.datasets if prepared else None,
                                  dataset_config=data_config(config),
                                  scaling_config=scaling_config(config), run_config=run_config),
                made)


def build_model(model: ModelSection, input_dim: int | None) -> Any:
    """The built-in model `{name, args}` in Keras: logits out; the CNN takes uint8-valued
    HxWxC images and normalises them as the torch models' inputs are ([-1, 1])."""
    import keras

    name, args = model["name"], dict(model.get("args") or {})
    classes = int(args.get("num_classes", models.default_classes(name)))
    if not models.is_image_model(model):
        if input_dim is None:
            raise ValueError("the mlp model needs tabular features")
        inputs = keras.Input((input_dim,))
        x = inputs
        for size in args.get("hidden_dims", (64, 64)):
            x = keras.layers.Dense(size, activation="relu")(x)
            x = keras.layers.Dropout(float(args.get("dropout", 0.0)))(x)
    else:
        side, width = int(args.get("image_size", 32)), int(args.get("width", 32))
        inputs = keras.Input((side, side, int(args.get("channels", 3))))
        x = keras.layers.Rescaling(1 / 127.5, offset=-1.0)(inputs)
        for filters in (width, 2 * width):   # two conv + pool stages, as the torch SmallCNN
            x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
            x = keras.layers.MaxPooling2D(2)(x)
        x = keras.layers.Dense(128, activation="relu")(keras.layers.Flatten()(x))
    return keras.Model(inputs, keras.layers.Dense(classes)(x), name=name)


def train_loop(loop_config: dict[str, Any], *, job: Mapping[str, Any]) -> None:
    import keras
    import ray.train
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")   # its INFO lines on the strategy, per worker and epoch
    strategy = tf.distribute.MultiWorkerMirroredStrategy()   # first: it sets up the collectives
    context = ray.train.get_context()
    batch_size = int(loop_config.get("batch_size_per_worker", 64))
    global_batch = batch_size * context.get_world_size()
    with strategy.scope():
        model, start = _restore()
        if model is None:
            model = build_model(job["model"], job["input_dim"])
            # compiled only to hold the optimizer, so that model.keras saves its state too
            model.compile(optimizer=keras.optimizers.AdamW(
                learning_rate=float(loop_config.get("lr", 1e-3)),
                weight_decay=float(loop_config.get("weight_decay", 1e-2))))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            losses = loss_fn(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(losses, global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return tf.stack([tf.reduce_sum(losses), tf.cast(tf.size(losses), tf.float32)])

    # traced: run eagerly, each collective op is slow (TensorFlow warns)
    distributed_step = tf.function(lambda x, y: strategy.run(step, args=(x, y)))

    x_column = data.IMAGE if job["image"] else data.FEATURES
    for epoch in range(start, int(loop_config.get("epochs", 1))):
        begin, local = time.perf_counter(), [0.0, 0.0]   # this worker's loss sum and rows
        for x, y in strategy.experimental_distribute_dataset(
                _shard("train", x_column, job["label"], global_batch)):
            for value in strategy.experimental_local_results(distributed_step(x, y)):
                local = [a + float(b) for a, b in zip(local, value.numpy(), strict=True)]
        elapsed = time.perf_counter() - begin
        split = "valid" if "valid" in job["splits"] else "train"
        loss, correct, count = _evaluate(model, loss_fn, _shard(split, x_column, job["label"],
                                                                batch_size))
        total_loss, seen, loss, correct, count = _all_sum(strategy, [*local, loss, correct, count])
        seconds = elapsed   # the workers step together: each one's time is the epoch's
        _report({"epoch": epoch + 1, "train_loss": total_loss / max(seen, 1),
                 "samples_per_second": seen / max(seconds, 1e-9), "train_seconds": seconds,
                 "loss": loss / max(count, 1), "accuracy": correct / max(count, 1)},
                model, epoch, context.get_world_rank())


def _shard(split: str, x_column: str, label: str, batch_size: int) -> Any:
    """This worker's shard of `split` as a tf.data.Dataset of (x, y) batches."""
    import ray.train
    from ray.train.tensorflow import prepare_dataset_shard

    shard = ray.train.get_dataset_shard(split)
    return prepare_dataset_shard(shard.to_tf(feature_columns=x_column, label_columns=label,
                                             batch_size=batch_size))


def _evaluate(model: Any, loss_fn: Any, batches: Any) -> tuple[float, float, float]:
    """This worker's loss sum, correct answers and rows over its shard (no collective: the
    shards' batch counts may differ)."""
    import numpy as np

    total, correct, count = 0.0, 0.0, 0.0
    for x, y in batches:
        logits = model(x, training=False)
        total += float(np.sum(loss_fn(y, logits)))
        correct += float(np.sum(np.argmax(logits, axis=1) == y.numpy()))
        count += len(y)
    return total, correct, count


def _all_sum(strategy: Any, values: list[float]) -> list[float]:
    """`values` summed over every worker (one all-reduce)."""
    import tensorflow as tf

    reduce = tf.function(lambda local: strategy.reduce(
        "SUM", strategy.run(lambda: tf.identity(local)), axis=None))
    return [float(v) for v in reduce(tf.constant(values, tf.float32)).numpy()]


def _restore() -> tuple[Any, int]:
    """The latest checkpoint's model (with its optimizer) and the epoch to start from, if Ray
    hands one over (resume, or a restart after a failure); else (None, 0)."""
    import keras
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None, 0
    with checkpoint.as_directory() as folder:
        model = keras.models.load_model(os.path.join(folder, CHECKPOINT_FILE))
        with open(os.path.join(folder, STATE_FILE), encoding="utf-8") as handle:
            epoch = int(json.load(handle)["epoch"])
    return model, epoch + 1


def _report(metrics: dict[str, float], model: Any, epoch: int, rank: int) -> None:
    import ray.train

    with tempfile.TemporaryDirectory() as folder:
        checkpoint = None
        if rank == 0:
            model.save(os.path.join(folder, CHECKPOINT_FILE))
            with open(os.path.join(folder, STATE_FILE), "w", encoding="utf-8") as handle:
                json.dump({"epoch": epoch}, handle)
            checkpoint = ray.train.Checkpoint.from_directory(folder)
            checkpoint.update_metadata({MODEL_FILENAME_KEY: CHECKPOINT_FILE})
        ray.train.report(metrics, checkpoint=checkpoint)


def load(checkpoint: str, card: dict[str, Any], use_gpu: bool) -> Scores:
    """The checkpoint's Keras model (TensorFlow places it on a GPU when its build has one)."""
    for name, value in ENVIRONMENT.items():   # a Serve replica may not have run worker.setup
        os.environ.setdefault(name, value)
    import keras
    from ray.train import Checkpoint

    found = Checkpoint(checkpoint)
    filename = found.get_metadata().get(MODEL_FILENAME_KEY, CHECKPOINT_FILE)
    with found.as_directory() as folder:
        model = keras.models.load_model(os.path.join(folder, filename), compile=False)
    return functools.partial(_scores, model, card)


def _scores(model: Any, card: dict[str, Any], batch: Any) -> Any:
    import keras
    import numpy as np

    if card["image"]:
        x = np.asarray(data.image_array(batch[data.IMAGE]), dtype=np.float32)
    else:
        x = np.column_stack([np.asarray(batch[c], dtype=np.float32) for c in card["features"]])
    logits = model(x, training=False)
    if card.get("class_names") is None:
        return keras.ops.convert_to_numpy(logits).squeeze(-1)
    return keras.ops.convert_to_numpy(keras.ops.softmax(logits, axis=1))
