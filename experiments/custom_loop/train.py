"""Your own Ray Train loop, shipped from working_dir and called exactly as
TorchTrainer(train_loop_per_worker=train_loop_per_worker, train_loop_config=...) would."""
import tempfile

import torch
from torch import nn

import ray.train
import ray.train.torch


def train_loop_per_worker(config: dict) -> None:
    torch.manual_seed(0)
    # A toy regression: learn y = 3x - 1 from points generated on each worker.
    x = torch.linspace(-1, 1, 256).unsqueeze(1)
    y = 3 * x - 1
    model = ray.train.torch.prepare_model(nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    for epoch in range(config["epochs"]):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        with tempfile.TemporaryDirectory() as tmp:
            torch.save(model.state_dict(), f"{tmp}/model.pt")
            ray.train.report({"epoch": epoch, "loss": loss.item()},
                             checkpoint=ray.train.Checkpoint.from_directory(tmp))
