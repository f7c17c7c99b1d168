"""`trainer: torch`: the TorchTrainer, with the built-in Ray Train loop (the tutorial's, for any
built-in model) or the user's own `train_loop`.

Per epoch: train, then validation loss/accuracy summed over every worker (an all-reduce, so the
numbers are the global ones, not rank 0's shard), then `ray.train.report` with a checkpoint
(`model.pt`: the plain module's state dict; `state.pt`: optimizer and epoch, for resuming).
`data_loader: torch` reads the splits into tensors for a DataLoader instead of Ray Data shards.
"""
from __future__ import annotations

import functools
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

from ...contract import JobConfig
from .. import data, models, tracking
from ..configs import data_config, scaling_config
from .base import Made, Scores, import_train_loop, network_data
from .base import network_class_names as class_names
from .base import network_metric as default_metric

NAME = "torch"
CHECKPOINT_FILE = "model.pt"
ENVIRONMENT: dict[str, str] = {}
DATA_LOADER = "torch"   # `data_loader: torch` (the other: ray_data), not the trainer's name

__all__ = ["CHECKPOINT_FILE", "ENVIRONMENT", "NAME", "class_names", "default_metric", "load",
           "make_trainer", "train_loop"]


def make_trainer(config: JobConfig, run_config: Any) -> Made:
    """A TorchTrainer for the resolved config; a built-in model's run hands back its prepared
    data (for the model card)."""
    from ray.train.torch import TorchTrainer

    loop_config = dict(config.get("train_loop_config") or {})
    image = models.is_image_model(config.get("model"))
    datasets: dict[str, Any] | None = None
    input_dim: int | None = None
    preprocessor: Any = None  # a fitted Ray Data preprocessor
    prepared: data.Prepared | None = None
    if config.get("data_loader") == DATA_LOADER and config.get("datasets"):
        data.check_paths(config)
        train, columns = data.with_columns(data.read(config["datasets"]["train"],
                                                     one_block=data.one_block_ok(config)),
                                           materialize=data.materialize_ok(config, image))
        preprocessor = data.fit_preprocessor(config, train, columns)
        after = columns if preprocessor is None or image else \
            data.columns_after(preprocessor, train)
        features = [data.IMAGE] if image else data.feature_columns(config, after)
        prepared = data.Prepared({}, preprocessor, columns, features,
                                 None if image else len(features), image)
    elif prepared := network_data(config):
        datasets, input_dim = prepared.datasets, prepared.input_dim
    if reference := config.get("train_loop"):
        loop = tracking.with_run(import_train_loop(reference), tracking.run_of(config))
        prepared = None   # the user's loop makes its own model: no card
    else:
        job = {"model": config.get("model"), "image": image, "input_dim": input_dim,
               "label": config.get("label_column") or "label", "preprocessor": preprocessor,
               "config": {k: config.get(k) for k in ("datasets", "label_column",
                                                     "feature_columns", "data_loader")}}
        loop = functools.partial(train_loop, job=job)
    return Made(TorchTrainer(loop, train_loop_config=loop_config, datasets=datasets,
                             dataset_config=data_config(config),
                             scaling_config=scaling_config(config), run_config=run_config),
                prepared)


def train_loop(loop_config: dict[str, Any], *, job: Mapping[str, Any]) -> None:
    import ray.train
    import ray.train.torch
    import torch

    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    batch_size = int(loop_config.get("batch_size_per_worker", 64))
    batches = _batch_sources(job, batch_size, world)
    input_dim = batches.pop("_input_dim", None) or job["input_dim"]
    model = ray.train.torch.prepare_model(models.build_model(job["model"], input_dim))
    plain = model.module if hasattr(model, "module") else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(loop_config.get("lr", 1e-3)),
                                  weight_decay=float(loop_config.get("weight_decay", 1e-2)))
    loss_fn = torch.nn.CrossEntropyLoss()
    start = _restore(plain, optimizer)
    for epoch in range(start, int(loop_config.get("epochs", 1))):
        model.train()
        begin, seen, train_loss = time.perf_counter(), 0, 0.0
        for x, y in batches["train"](epoch):
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen += len(y)
            train_loss += loss.item() * len(y)
        elapsed = time.perf_counter() - begin
        train = _all_reduce([train_loss, seen], world)
        seconds = _all_reduce([elapsed], world, op="max")[0]
        metrics = {"epoch": epoch + 1, "train_loss": train[0] / max(train[1], 1),
                   "samples_per_second": train[1] / max(seconds, 1e-9),
                   "train_seconds": seconds}
        metrics.update(_evaluate(model, loss_fn, batches.get("valid") or batches["train"], world))
        _report(metrics, plain, optimizer, epoch, rank)


def _batch_sources(job: Mapping[str, Any], batch_size: int, world: int) -> dict[str, Any]:
    """split -> function(epoch) yielding (x, y); ray_data shards or prepared DataLoaders."""
    import ray.train
    import ray.train.torch
    import torch

    splits = [s for s in ("train", "valid") if s in job["config"]["datasets"]]
    label, x_column = job["label"], data.IMAGE if job["image"] else data.FEATURES
    sources: dict[str, Any] = {}
    if job["config"].get("data_loader") == DATA_LOADER:
        for split in splits:
            x, y = data.load_tensors(job["config"], split, job["preprocessor"], job["image"])
            loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                                 batch_size=batch_size, shuffle=split == "train")
            loader = ray.train.torch.prepare_data_loader(loader)
            sources[split] = functools.partial(_from_loader, loader, world)
            if split == "train" and not job["image"]:
                sources["_input_dim"] = x.shape[1]
        return sources
    # Images come as read (uint8, `ray_datasets(raw_images=True)`): a quarter of the bytes
    # through Ray Data, and normalised per batch here.
    dtypes = {x_column: torch.uint8 if job["image"] else torch.float32, label: torch.long}
    for split in splits:
        shard = ray.train.get_dataset_shard(split)
        sources[split] = functools.partial(_from_shard, shard, batch_size, dtypes, x_column, label,
                                           data.normalize_tensor if job["image"] else None)
    return sources


def _from_loader(loader: Any, world: int, epoch: int) -> Iterator[Any]:
    if world > 1 and hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)
    yield from loader


def _from_shard(shard: Any, batch_size: int, dtypes: dict[str, Any], x_column: str, label: str,
                transform: Callable[[Any], Any] | None, _epoch: int) -> Iterator[tuple[Any, Any]]:
    for batch in shard.iter_torch_batches(batch_size=batch_size, dtypes=dtypes):
        x = batch[x_column]
        yield (transform(x) if transform else x), batch[label]


def _evaluate(model: Any, loss_fn: Any, batches: Callable[[int], Iterator[Any]],
              world: int) -> dict[str, float]:
    import torch

    model.eval()
    correct: float  # counts, summed as floats by _all_reduce
    count: float
    total_loss, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for x, y in batches(0):
            out = model(x)
            total_loss += loss_fn(out, y).item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            count += len(y)
    total_loss, correct, count = _all_reduce([total_loss, correct, count], world)
    return {"loss": total_loss / max(count, 1), "accuracy": correct / max(count, 1)}


def _all_reduce(values: list[float], world: int, op: str = "sum") -> list[float]:
    if world == 1:
        return list(values)
    import torch
    import torch.distributed as dist

    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return tensor.tolist()


def _restore(plain: Any, optimizer: Any) -> int:
    """Load the latest checkpoint if Ray hands one over (resume or a restart after a failure)."""
    import ray.train
    import torch

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return 0
    with checkpoint.as_directory() as folder:
        plain.load_state_dict(torch.load(os.path.join(folder, CHECKPOINT_FILE),
                                         weights_only=True))
        state = torch.load(os.path.join(folder, "state.pt"), weights_only=True)
    optimizer.load_state_dict(state["optimizer"])
    return cast(int, state["epoch"]) + 1


def _report(metrics: dict[str, float], plain: Any, optimizer: Any, epoch: int, rank: int) -> None:
    import ray.train
    import torch

    with tempfile.TemporaryDirectory() as folder:
        checkpoint = None
        if rank == 0:
            torch.save(plain.state_dict(), os.path.join(folder, CHECKPOINT_FILE))
            torch.save({"optimizer": optimizer.state_dict(), "epoch": epoch},
                       os.path.join(folder, "state.pt"))
            checkpoint = ray.train.Checkpoint.from_directory(folder)
        ray.train.report(metrics, checkpoint=checkpoint)


def load(checkpoint: str, card: dict[str, Any], use_gpu: bool) -> Scores:
    import torch
    from ray.train import Checkpoint

    device = "cuda" if use_gpu and torch.cuda.is_available() else "cpu"
    model = models.build_model(card["model"], card.get("input_dim"))
    with Checkpoint(checkpoint).as_directory() as folder:
        state = torch.load(os.path.join(folder, CHECKPOINT_FILE), map_location=device,
                           weights_only=True)
    model.load_state_dict(state)
    return functools.partial(_scores, model.to(device).eval(), device, card)


def _scores(model: Any, device: str, card: dict[str, Any], batch: Any) -> Any:
    import numpy as np
    import torch

    if card["image"]:
        x = data.normalize_images({data.IMAGE: data.image_array(batch[data.IMAGE])})[data.IMAGE]
    else:
        x = np.column_stack([np.asarray(batch[c], dtype=np.float32) for c in card["features"]])
    with torch.inference_mode():
        logits = model(torch.as_tensor(np.ascontiguousarray(x)).to(device))
        if card.get("class_names") is None:
            return logits.squeeze(-1).cpu().numpy()
        return torch.softmax(logits.float(), dim=1).cpu().numpy()
