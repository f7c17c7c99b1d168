"""The reference for `time_to_result.py`: the quickstart written the seeds' way, one Python file.
`ray.init()` in-process, Ray Data CSV + StandardScaler (fitted on train) + Concatenator, a
`TorchTrainer` with the same MLP, data, epochs, batch size and checkpoints (num_to_keep 1, best
accuracy) as `experiments/quickstart.yaml`. Run as a script (cold: it starts and stops its own
Ray), or submitted with `ray job submit` to a running Ray (it then connects to that one).

    python handwritten_quickstart.py TRAIN_CSV VALID_CSV STORAGE NAME [WORKERS EPOCHS LR]

WORKERS, EPOCHS and LR default to the quickstart's 2, 5 and 0.01 (`many_runs.py` runs 1 worker,
1 epoch, a learning rate of its own per run).

`ray.init(num_cpus=4)` on a 2-core machine: plain `ray.init()` sizes Ray to 2 CPUs, the two
workers take both and Ray Data gets none, and the script hangs (orchestrate's embedded Ray sizes
itself the same way, max(cores, 4)).
"""
import os
import sys
import tempfile
import time

import ray
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from ray.data.preprocessors import Concatenator, StandardScaler
from ray.train import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

train_csv, valid_csv, storage, name = sys.argv[1:5]
workers, epochs, lr = (int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])) if len(sys.argv) > 5 \
    else (2, 5, 0.01)
begin = time.perf_counter()


def train_func(config):
    model = torch.nn.Sequential(
        torch.nn.Linear(config["input_dim"], 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    model = ray.train.torch.prepare_model(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=1e-4)
    criterion = torch.nn.CrossEntropyLoss()
    dtypes = {"features": torch.float32, "target": torch.long}
    train_shard = ray.train.get_dataset_shard("train")
    valid_shard = ray.train.get_dataset_shard("valid")
    for epoch in range(config["epochs"]):
        model.train()
        for b in train_shard.iter_torch_batches(batch_size=32, dtypes=dtypes):
            loss = criterion(model(b["features"]), b["target"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        totals = torch.zeros(3, dtype=torch.float64)
        with torch.no_grad():
            for b in valid_shard.iter_torch_batches(batch_size=32, dtypes=dtypes):
                out = model(b["features"])
                totals += torch.tensor([criterion(out, b["target"]).item() * len(b["target"]),
                                        (out.argmax(1) == b["target"]).sum().item(),
                                        len(b["target"])], dtype=torch.float64)
        dist.all_reduce(totals)
        metrics = {"epoch": epoch + 1, "loss": (totals[0] / totals[2]).item(),
                   "accuracy": (totals[1] / totals[2]).item()}
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if ray.train.get_context().get_world_rank() == 0:
                torch.save(getattr(model, "module", model).state_dict(),  # DDP only with 2+ workers
                           os.path.join(tmp, "model.pt"))
                checkpoint = Checkpoint.from_directory(tmp)
            ray.train.report(metrics, checkpoint=checkpoint)


# submitted as a job, it joins the Ray it was sent to (which refuses num_cpus)
ray.init(**({} if os.environ.get("RAY_ADDRESS") else {"num_cpus": max(os.cpu_count() or 1, 4)}))
train_ds = ray.data.read_csv(train_csv)
valid_ds = ray.data.read_csv(valid_csv)
features = [c for c in train_ds.schema().names if c != "target"]
scaler = StandardScaler(columns=features)
scaler.fit(train_ds)
concat = Concatenator(columns=features, output_column_name="features")
train_ds = concat.transform(scaler.transform(train_ds))
valid_ds = concat.transform(scaler.transform(valid_ds))
trainer = TorchTrainer(
    train_func,
    train_loop_config={"lr": lr, "epochs": epochs, "input_dim": len(features)},
    scaling_config=ScalingConfig(num_workers=workers, use_gpu=False),
    datasets={"train": train_ds, "valid": valid_ds},
    run_config=RunConfig(name=name, storage_path=storage, checkpoint_config=CheckpointConfig(
        num_to_keep=1, checkpoint_score_attribute="accuracy", checkpoint_score_order="max")),
)
result = trainer.fit()
print("HANDWRITTEN_RESULT", result.metrics, f"{time.perf_counter() - begin:.1f} s", flush=True)
