"""`orchestrate serve`'s application, run by Ray Serve on the cluster (`import_path`
`orchestrator.workload.serving:build`; the deployment is `Predictor`).

A FastAPI ingress around `inference.Predictor`, the same code `orchestrate predict` runs:

    POST {route}/predict   JSON records ([{col: value}, ...]), or columns ({col: [values]}),
                           or either under "records"/"columns" -> {"predictions": [row, ...]};
                           for an image model also an image body (Content-Type image/png,
                           image/jpeg, ...) -> its row and "top": [{class, confidence}, ...]
                           (`rows`)
    GET  {route}/healthz   200 once the model is loaded (503 before), no token needed
    GET  {route}/metadata  the model card's summary and the checkpoint served
    {route}/demo/...       with `demo: true`, the demo page: a Gradio app behind its sign-in
                           (`demo_app.Gate`); else 404, and Gradio is never imported

Everything that may change without restarting a replica is the deployment's `user_config`
(the checkpoint, the token's and the demo page secret's SHA-256, the batching): Serve calls
`reconfigure` with it, which loads a new checkpoint beside the one serving and swaps when it is
ready, so an update drops no request. Only the hashes reach the cluster; the Serve proxy has no
authentication of its own, so every route but healthz checks `Authorization: Bearer <token>`
(`access.authorized`); the demo page takes its sign-in cookie instead (`access`, `demo_page`).
"""
# No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations
# (`request: Request`) as objects, and `Request` is imported inside `build`.
import asyncio
import functools
from collections.abc import Mapping
from typing import Any

from ..contract import ServeUserConfig
from .access import authorized


def plain(frame: Any) -> list[dict[str, Any]]:
    """Prediction rows as JSON-ready dicts: Python numbers (`tolist`), every digit kept."""
    columns = [str(c) for c in frame.columns]
    values = [frame[c].tolist() for c in frame.columns]
    return [dict(zip(columns, row, strict=True)) for row in zip(*values, strict=True)]


@functools.cache
def _forwarding() -> Any:
    from starlette.responses import Response

    class Forward(Response):
        """An endpoint's answer that hands the request, as it came, to an ASGI app: FastAPI
        awaits a Response it is given with the request's own receive and send."""

        def __init__(self, app: Any) -> None:
            self.app, self.background = app, None

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await self.app(scope, receive, send)

    return Forward


def forward(app: Any) -> Any:
    """The answer of a route that is `app`'s (`demo_app.Gate`: Gradio's routes are many, and
    stream)."""
    return _forwarding()(app)


EVERY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def build(args: dict[str, Any]) -> Any:
    """The application builder Serve calls with the config's `args` (unused: see user_config)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response
    from ray import serve

    from ..contract import SERVE_DEPLOYMENT
    from . import card, demo_app, inference, rows

    api = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @serve.deployment(name=SERVE_DEPLOYMENT)
    @serve.ingress(api)
    class Predictor:
        def __init__(self) -> None:
            self.predictor: inference.Predictor | None = None
            self.loaded: card.Loaded | None = None
            self.auth: Mapping[str, Any] = {}   # until reconfigure: every route refused
            self.name = serve.get_replica_context().replica_id.deployment_id.app_name
            self.gate: demo_app.Gate | None = None   # made once the page is asked for

        async def reconfigure(self, config: ServeUserConfig) -> None:
            self.auth = {"auth": config.get("auth"), "token_sha256": config.get("token_sha256"),
                         "demo": bool(config.get("demo")),
                         "demo_sha256": config.get("demo_sha256")}
            batched: Any = self.predict_rows  # serve.batch's wrapper: set_* change it live
            batched.set_max_batch_size(int(config.get("max_batch_size", 1)))
            batched.set_batch_wait_timeout_s(float(config.get("batch_wait_timeout_s", 0.0)))
            if self.loaded is None or self.loaded.checkpoint != config["checkpoint"]:
                loaded = await asyncio.to_thread(card.load, config["checkpoint"])
                predictor = await asyncio.to_thread(inference.Predictor, loaded,
                                                    use_gpu=bool(config.get("use_gpu")))
                self.loaded, self.predictor = loaded, predictor  # the swap: one assignment
            if self.auth["demo"] and self.gate is None:
                self.gate = demo_app.Gate(self.name)
            if self.gate is not None:
                await self.gate.configure(self.auth, self.loaded.card, self.loaded.checkpoint,
                                          self.predict_frame, config.get("demo_app"))

        @serve.batch(max_batch_size=1, batch_wait_timeout_s=0.0)
        async def predict_rows(self, frames: list[Any]) -> list[list[dict[str, Any]]]:
            """Many requests' rows in one model call; each request gets its own rows back."""
            import pandas as pd

            predictor = self.predictor
            assert predictor is not None  # healthz and predict answer 503 before
            predicted = plain(predictor(frames[0] if len(frames) == 1 else
                                        pd.concat(frames, ignore_index=True)))
            answers, start = [], 0
            for frame in frames:
                answers.append(predicted[start:start + len(frame)])
                start += len(frame)
            return answers

        async def predict_frame(self, frame: Any) -> list[dict[str, Any]]:
            """The rows of a DataFrame predicted, as `/predict` answers them (the demo page's
            predict); ValueError for a missing column."""
            if self.predictor is None:
                raise ValueError("the model is loading")
            missing = [c for c in self.predictor.card["required_columns"]
                       if c not in frame.columns]
            if missing:
                raise ValueError(f"missing column(s): {', '.join(missing)}")
            return [] if frame.empty else list(await self.predict_rows(frame))

        def refused(self, request: Request) -> JSONResponse | None:
            """401 without the token, 503 before the model is loaded; None: go on."""
            if not authorized(request.headers, self.auth):
                return JSONResponse({"error": "missing or wrong token"}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
            if self.loaded is None:
                return JSONResponse({"error": "the model is loading"}, status_code=503)
            return None

        @api.get("/healthz")
        async def healthz(self) -> JSONResponse:
            if self.predictor is None:
                return JSONResponse({"status": "loading"}, status_code=503)
            return JSONResponse({"status": "ok"})

        @api.get("/metadata")
        async def metadata(self, request: Request) -> JSONResponse:
            if (answer := self.refused(request)) is not None or self.loaded is None:
                return answer or JSONResponse({}, status_code=503)
            model = self.loaded.card
            return JSONResponse({
                "experiment": model["experiment"], "trainer": model["trainer"],
                "model": model["model"], "features": model["required_columns"],
                "label_column": model["label_column"], "task": model["task"],
                "class_names": model["class_names"], "checkpoint": self.loaded.checkpoint,
                "outputs": [inference.PREDICTION, *inference.probability_columns(model)]})

        @api.post("/predict")
        async def predict(self, request: Request) -> JSONResponse:
            if (answer := self.refused(request)) is not None or self.predictor is None:
                return answer or JSONResponse({}, status_code=503)
            try:
                frame = await rows.request_rows(request, self.predictor.card)
                return JSONResponse(rows.answer(request.headers, await self.predict_frame(frame)))
            except ValueError as exc:
                return JSONResponse({"error": f"bad request body: {exc}"}, status_code=400)

        @api.api_route("/demo", methods=EVERY_METHOD, include_in_schema=False)
        @api.api_route("/demo/{rest:path}", methods=EVERY_METHOD, include_in_schema=False)
        async def demo(self, request: Request) -> Response:
            if self.gate is None:   # `demo: false`: no page, nothing of Gradio loaded
                return JSONResponse({"detail": "Not Found"}, status_code=404)
            return forward(self.gate)  # type: ignore[no-any-return]

    return Predictor.bind()  # type: ignore[attr-defined]  # serve.deployment adds bind()
