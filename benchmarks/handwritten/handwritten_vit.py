"""The reference: a hand-written Ray Train script in the Ray Train + Ray Data tutorial's style
(variant B), submitted with `ray job submit`. Only the model comes from orchestrate, because
torchvision does not import here; it is torchvision's VisionTransformer, same arguments.

    python handwritten_vit.py TRAIN_DIR VALID_DIR STORAGE NAME WORKERS EPOCHS BATCH MODEL_JSON
"""
import json
import os
import sys
import tempfile
import time

import numpy as np
import ray
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from orchestrator.workload.models import build_model

train_dir, valid_dir, storage, name, workers, epochs, batch, model_json = sys.argv[1:9]


def transform(batch):  # ToTensor + Normalize((0.5,)*3, (0.5,)*3), on numpy batches
    images = batch["image"].astype(np.float32) / 255.0
    batch["image"] = ((images - 0.5) / 0.5).transpose(0, 3, 1, 2)
    return batch


def train_func(config):
    model = ray.train.torch.prepare_model(build_model(config["model"]))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=1e-2)
    criterion = torch.nn.CrossEntropyLoss()
    train_shard = ray.train.get_dataset_shard("train")
    valid_shard = ray.train.get_dataset_shard("valid")
    dtypes = {"image": torch.float32, "label": torch.long}
    for epoch in range(config["epochs"]):
        model.train()
        start, seen = time.perf_counter(), 0
        for b in train_shard.iter_torch_batches(batch_size=config["batch_size_per_worker"], dtypes=dtypes):
            loss = criterion(model(b["image"]), b["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen += len(b["label"])
        totals = torch.tensor([seen, time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(totals[:1])
        dist.all_reduce(totals[1:], op=dist.ReduceOp.MAX)
        model.eval()
        valid_loss, correct, count = 0.0, 0, 0
        with torch.no_grad():
            for b in valid_shard.iter_torch_batches(batch_size=config["batch_size_per_worker"],
                                                    dtypes=dtypes):
                out = model(b["image"])
                valid_loss += criterion(out, b["label"]).item() * len(b["label"])
                correct += (out.argmax(1) == b["label"]).sum().item()
                count += len(b["label"])
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if ray.train.get_context().get_world_rank() == 0:
                torch.save(model.module.state_dict(), os.path.join(tmp, "model.pt"))
                checkpoint = Checkpoint.from_directory(tmp)
            metrics = {"loss": valid_loss / max(count, 1), "accuracy": correct / max(count, 1),
                       "samples_per_second": totals[0].item() / totals[1].item()}
            ray.train.report(metrics, checkpoint=checkpoint)
        if ray.train.get_context().get_world_rank() == 0:
            print(f"epoch {epoch}: {metrics}")
            print("HANDWRITTEN_THROUGHPUT", metrics["samples_per_second"], flush=True)


train_ds = ray.data.read_parquet(train_dir).map_batches(transform, batch_format="numpy")
valid_ds = ray.data.read_parquet(valid_dir).map_batches(transform, batch_format="numpy")
trainer = TorchTrainer(
    train_func,
    train_loop_config={"lr": 1e-3, "epochs": int(epochs), "batch_size_per_worker": int(batch),
                       "model": json.loads(model_json)},
    scaling_config=ScalingConfig(num_workers=int(workers), use_gpu=False),
    run_config=RunConfig(storage_path=storage, name=name),
    datasets={"train": train_ds, "valid": valid_ds},
)
result = trainer.fit()
print("final metrics", result.metrics)
