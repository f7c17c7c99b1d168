"""The reference for `orchestrate serve`: the XGBoost model of a Ray Train run behind an HTTP
endpoint, as Ray Serve's docs write it (a `@serve.deployment` class with a FastAPI ingress, the
model loaded once per replica, `@serve.batch` gathering concurrent requests into one model call),
deployed with `serve.run` from a driver connected to a running Ray. No authentication. Nothing
comes from orchestrate: the booster is read with Ray's XGBoost callback, the fitted preprocessor
with Ray Data's own deserializer.

    python handwritten_serve.py CHECKPOINT_DIR PREPROCESSOR_FILE NAME ROUTE_PREFIX REPLICAS CPUS
        MAX_ONGOING_REQUESTS MAX_BATCH_SIZE BATCH_WAIT_TIMEOUT_S

Connects with `ray.init()` (RAY_ADDRESS names the cluster), returns once the application is
RUNNING (it keeps running after this driver exits) and prints `HANDWRITTEN_SERVE name NAME
route ROUTE_PREFIX`.

    POST {ROUTE_PREFIX}/predict   JSON records [{column: value}, ...]
        -> {"predictions": [{"prediction": class, "probability_0": p0, "probability_1": p1}, ...]}
"""
import sys

import numpy as np
import pandas as pd
import ray
import xgboost
from fastapi import FastAPI, Request
from ray import serve
from ray.data.preprocessor import SerializablePreprocessorBase
from ray.train import Checkpoint
from ray.train.xgboost import RayTrainReportCallback

(checkpoint_dir, preprocessor_file, name, route_prefix, replicas, cpus, max_ongoing,
 max_batch_size, batch_wait_timeout_s) = sys.argv[1:10]

api = FastAPI()


@serve.deployment(num_replicas=int(replicas), ray_actor_options={"num_cpus": float(cpus)},
                  max_ongoing_requests=int(max_ongoing))
@serve.ingress(api)
class XGBoostClassifier:
    def __init__(self, checkpoint: str, preprocessor: str) -> None:
        self.booster = RayTrainReportCallback.get_model(Checkpoint(checkpoint))
        self.features = self.booster.feature_names  # the train split's columns, in model order
        with open(preprocessor, "rb") as f:
            self.preprocessor = SerializablePreprocessorBase.deserialize(f.read())

    @serve.batch(max_batch_size=int(max_batch_size), batch_wait_timeout_s=float(batch_wait_timeout_s))
    async def predict_batch(self, frames: list) -> list:
        """Many requests' rows in one booster call; each request gets its own rows back."""
        sizes = [len(f) for f in frames]
        batch = self.preprocessor.transform_batch(pd.concat(frames, ignore_index=True))
        positive = self.booster.predict(xgboost.DMatrix(batch[self.features]))  # binary:logistic
        rows = [{"prediction": int(p > 0.5), "probability_0": float(1.0 - p), "probability_1": float(p)}
                for p in positive]
        ends = np.cumsum(sizes)
        return [rows[end - size:end] for size, end in zip(sizes, ends, strict=True)]

    @api.post("/predict")
    async def predict(self, request: Request) -> dict:
        records = await request.json()
        return {"predictions": await self.predict_batch(pd.DataFrame.from_records(records))}


ray.init()
serve.run(XGBoostClassifier.bind(checkpoint_dir, preprocessor_file), name=name, route_prefix=route_prefix)
print(f"HANDWRITTEN_SERVE name {name} route {route_prefix}", flush=True)
