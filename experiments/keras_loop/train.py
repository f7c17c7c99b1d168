"""Your own Ray Train loop for TensorFlow, shipped from working_dir and called exactly as
TensorflowTrainer(train_loop_per_worker=train_loop_per_worker, train_loop_config=...) would.

Keras 3's `model.fit` fails under MultiWorkerMirroredStrategy (keras-team/keras#20585), so the
loop steps itself: `strategy.run` of a train step whose loss is averaged over the global batch.
Use `import keras` (Keras 3), not `tf.keras`: Ray's TensorFlow backend sets
TF_USE_LEGACY_KERAS=1 in the workers, which points `tf.keras` at the tf_keras package.
"""
import os
import tempfile

import keras
import tensorflow as tf

import ray.train
from ray.train.tensorflow import prepare_dataset_shard


def train_loop_per_worker(config: dict) -> None:
    # A toy regression: learn y = 3x - 1 from line.csv, each worker on its shard of the rows.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(learning_rate=config["lr"])
    global_batch = config["batch_size_per_worker"] * ray.train.get_context().get_world_size()
    shard = ray.train.get_dataset_shard("train")

    def step(x, y):   # a batch of x and of y, float64 as read from the CSV
        x, y = tf.cast(tf.expand_dims(x, -1), tf.float32), tf.cast(y, tf.float32)
        with tf.GradientTape() as tape:
            errors = tf.square(model(x, training=True)[:, 0] - y)
            loss = tf.nn.compute_average_loss(errors, global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    @tf.function
    def distributed_step(x, y):
        return strategy.reduce("SUM", strategy.run(step, args=(x, y)), axis=None)

    for epoch in range(config["epochs"]):
        batches = prepare_dataset_shard(shard.to_tf(feature_columns="x", label_columns="y",
                                                    batch_size=global_batch))
        losses = [float(distributed_step(x, y))
                  for x, y in strategy.experimental_distribute_dataset(batches)]
        with tempfile.TemporaryDirectory() as folder:
            checkpoint = None
            if ray.train.get_context().get_world_rank() == 0:
                model.save(os.path.join(folder, "model.keras"))
                checkpoint = ray.train.Checkpoint.from_directory(folder)
            ray.train.report({"epoch": epoch + 1, "loss": sum(losses) / len(losses)},
                             checkpoint=checkpoint)
