"""The reference for `orchestrate predict`: batch inference as Ray's batch-inference docs write it
(a callable class that loads the model once per actor, `map_batches` over an actor pool,
`write_parquet`), submitted with `ray job submit`. Only the model comes from orchestrate, because
torchvision does not import here; it is torchvision's VisionTransformer, same arguments.

    python handwritten_predict.py DATA_DIR OUTPUT_DIR CHECKPOINT_DIR WORKERS BATCH MODEL_JSON

Prints `HANDWRITTEN_PREDICT rows R seconds S rows_per_second X`, timed as orchestrate times it:
from the start of map_batches to the end of the write.
"""
import json
import os
import sys
import time

import numpy as np
import ray
import torch
from ray.data import ActorPoolStrategy

from orchestrator.workload.models import build_model

data_dir, output_dir, checkpoint_dir, workers, batch, model_json = sys.argv[1:7]


class ViTPredictor:
    def __init__(self, checkpoint, model):
        self.model = build_model(model)
        self.model.load_state_dict(torch.load(os.path.join(checkpoint, "model.pt"), map_location="cpu"))
        self.model.eval()
        # not `self.classes`: cloudpickle would then try to ship the module torch.classes
        self.labels = np.arange(model["args"]["num_classes"])

    def __call__(self, batch):
        images = batch["image"].astype(np.float32) / 255.0  # ToTensor + Normalize((0.5,)*3, (0.5,)*3)
        images = ((images - 0.5) / 0.5).transpose(0, 3, 1, 2)
        with torch.inference_mode():
            probabilities = torch.softmax(self.model(torch.as_tensor(np.ascontiguousarray(images))), dim=1)
        probabilities = probabilities.numpy()
        out = {"label": batch["label"], "prediction": self.labels[probabilities.argmax(axis=1)]}
        for i in self.labels:
            out[f"probability_{i}"] = probabilities[:, i].astype(np.float64)
        return out


ds = ray.data.read_parquet(data_dir)
start = time.monotonic()
ds.map_batches(
    ViTPredictor,
    fn_constructor_kwargs={"checkpoint": checkpoint_dir, "model": json.loads(model_json)},
    compute=ActorPoolStrategy(size=int(workers)),
    batch_size=int(batch),
    batch_format="numpy",
).write_parquet(output_dir)
seconds = time.monotonic() - start
rows = ray.data.read_parquet(output_dir).count()
print(f"HANDWRITTEN_PREDICT rows {rows} seconds {seconds:.3f} rows_per_second {rows / seconds:.1f}",
      flush=True)
