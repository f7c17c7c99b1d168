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
    GET  {route}/demo      with `demo: true`, a page to try the model (`demo_page`); else 404
    POST {route}/demo/predict  the page's predict: the same, with the page's cookie

Everything that may change without restarting a replica is the deployment's `user_config`
(the checkpoint, the token's and the demo page secret's SHA-256, the batching): Serve calls
`reconfigure` with it, which loads a new checkpoint beside the one serving and swaps when it is
ready, so an update drops no request. Only the hashes reach the cluster; the Serve proxy has no
authentication of its own, so every route but healthz checks `Authorization: Bearer <token>`
here (`authorized`); the demo page and its predict take the page's cookie instead
(`demo_authorized`): a MAC of its expiry keyed by the page secret's SHA-256 (`demo_page`), good
for 12 hours, so a cookie copied once does not open the page for good.
"""
# No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations
# (`request: Request`) as objects, and `Request` is imported inside `build`.
import asyncio
import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any

from ..contract import ServeUserConfig
from . import demo_page

SHA256 = re.compile(r"[0-9a-f]{64}")


def token_matches(header: str | None, config: Mapping[str, Any]) -> bool:
    """`Authorization: Bearer <token>` against the user_config's hash. Fails closed: only
    `auth: "none"`, written out, lets a request without the token in; a config whose hash is
    missing or not a SHA-256 (hand-made, from another version, not yet applied) refuses all."""
    if config.get("auth") == "none":
        return True
    expected = config.get("token_sha256")
    if config.get("auth") != "token" or not isinstance(expected, str) \
            or not SHA256.fullmatch(expected):
        return False
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return False
    digest = hashlib.sha256(token.strip().encode()).hexdigest()
    return hmac.compare_digest(digest, expected)


def authorized(headers: Mapping[str, str], config: Mapping[str, Any]) -> bool:
    """The API: the Bearer token only (the demo page's secret is no token)."""
    return token_matches(headers.get("authorization"), config)


def demo_authorized(headers: Mapping[str, str], config: Mapping[str, Any], *,
                    page: bool = False, now: float | None = None) -> bool:
    """The demo page (`page`, a navigation) or its predict: with the demo on, the Bearer token,
    or a sign-in cookie of the page (`demo_page.signed_in`, keyed by `demo_sha256`) not yet
    expired; for its predict only with `demo_page.HEADER`, which a page of another origin
    cannot add without a CORS preflight. Fails closed as `token_matches` does."""
    if not config.get("demo"):
        return False
    if token_matches(headers.get("authorization"), config):
        return True
    if not (page or headers.get(demo_page.HEADER)):
        return False
    return not_signed_in(headers, config, now) is None


def not_signed_in(headers: Mapping[str, str], config: Mapping[str, Any],
                  now: float | None = None) -> str | None:
    """None when a page cookie of the request signs it in; else why not: "none" (no cookie),
    "expired", or "wrong" (forged, another secret's, or the page not signed in to here)."""
    values = demo_page.cookie_values(headers.get("cookie"))
    if not values:
        return "none"
    key = config.get("demo_sha256")
    if config.get("auth") != "token" or not isinstance(key, str) or not SHA256.fullmatch(key):
        return "wrong"
    found = [demo_page.signed_in(value, key, now) for value in values]
    if None in found:
        return None
    return "expired" if "expired" in found else "wrong"


REASONS = {"none": "Your browser is not signed in.",
           "expired": f"Your browser's sign-in has expired (a sign-in lasts "
                      f"{demo_page.LIFETIME // 3600} hours).",
           "wrong": "Your browser's sign-in is not for this service's page as it is now served."}


def page_refused(headers: Mapping[str, str], config: Mapping[str, Any], name: str,
                 now: float | None = None) -> str | None:
    """The page's sign-in note (served with 401) for a request it does not let in; None: the
    page."""
    if demo_authorized(headers, config, page=True, now=now):
        return None
    return demo_page.signed_out(name, REASONS[not_signed_in(headers, config, now) or "wrong"])


def plain(frame: Any) -> list[dict[str, Any]]:
    """Prediction rows as JSON-ready dicts: Python numbers (`tolist`), every digit kept."""
    columns = [str(c) for c in frame.columns]
    values = [frame[c].tolist() for c in frame.columns]
    return [dict(zip(columns, row, strict=True)) for row in zip(*values, strict=True)]


def build(args: dict[str, Any]) -> Any:
    """The application builder Serve calls with the config's `args` (unused: see user_config)."""
    import secrets

    from fastapi import FastAPI, Request
    from fastapi.responses import HTMLResponse, JSONResponse, Response
    from ray import serve

    from ..contract import SERVE_DEPLOYMENT
    from . import card, inference, rows

    api = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @serve.deployment(name=SERVE_DEPLOYMENT)
    @serve.ingress(api)
    class Predictor:
        def __init__(self) -> None:
            self.predictor: inference.Predictor | None = None
            self.loaded: card.Loaded | None = None
            self.auth: Mapping[str, Any] = {}   # until reconfigure: every route refused
            self.name = serve.get_replica_context().replica_id.deployment_id.app_name

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

        @serve.batch(max_batch_size=1, batch_wait_timeout_s=0.0)
        async def predict_rows(self, frames: list[Any]) -> list[list[dict[str, Any]]]:
            """Many requests' rows in one model call; each request gets its own rows back."""
            import pandas as pd

            predictor = self.predictor
            assert predictor is not None  # healthz and predict answer 503 before
            rows = plain(predictor(frames[0] if len(frames) == 1 else
                                   pd.concat(frames, ignore_index=True)))
            answers, start = [], 0
            for frame in frames:
                answers.append(rows[start:start + len(frame)])
                start += len(frame)
            return answers

        def refused(self, request: Request, demo: bool = False) -> JSONResponse | None:
            """401 without the token (`demo`: or the page's cookie), 503 before the model is
            loaded; None: go on."""
            if not (demo_authorized(request.headers, self.auth) if demo
                    else authorized(request.headers, self.auth)):
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
            return await self.answer(request, demo=False)

        @api.post("/demo/predict")
        async def demo_predict(self, request: Request) -> JSONResponse:
            if not self.auth.get("demo"):
                return JSONResponse({"detail": "Not Found"}, status_code=404)
            return await self.answer(request, demo=True)

        async def answer(self, request: Request, demo: bool) -> JSONResponse:
            if (answer := self.refused(request, demo)) is not None or self.predictor is None:
                return answer or JSONResponse({}, status_code=503)
            try:
                frame = await rows.request_rows(request, self.predictor.card)
            except ValueError as exc:
                return JSONResponse({"error": f"bad request body: {exc}"}, status_code=400)
            missing = [c for c in self.predictor.card["required_columns"] if c not in frame.columns]
            if missing:
                return JSONResponse({"error": f"missing column(s): {', '.join(missing)}"},
                                    status_code=400)
            if frame.empty:
                return JSONResponse({"predictions": []})
            return JSONResponse(rows.answer(request.headers, await self.predict_rows(frame)))

        @api.get("/demo")
        async def demo(self, request: Request) -> Response:
            if not self.auth.get("demo"):
                return JSONResponse({"detail": "Not Found"}, status_code=404)
            note = page_refused(request.headers, self.auth, self.name)
            if note is not None:   # never the page: its sign-in path again
                return HTMLResponse(note, status_code=401, headers=demo_page.security_headers())
            if self.loaded is None:
                return HTMLResponse("The model is loading; reload in a moment.\n",
                                    status_code=503, headers=demo_page.security_headers())
            nonce = secrets.token_urlsafe(16)
            return HTMLResponse(demo_page.page(self.loaded.card, self.loaded.checkpoint,
                                               self.name, nonce),
                                headers=demo_page.security_headers(nonce))

    return Predictor.bind()  # type: ignore[attr-defined]  # serve.deployment adds bind()
