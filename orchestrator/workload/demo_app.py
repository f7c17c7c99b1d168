"""The demo page (`demo: true` in a service file) as a Gradio app, served at `{route}/demo/` by
the service's own Serve replica (`serving`), behind `Gate`.

Ray Serve 2.60 still ships `ray.serve.gradio_integrations`, but it builds its app through
`gradio.routes.App.create_app` as Gradio 4 had it, and it makes Gradio the whole deployment:
there would be no place for the service's `/predict` and its token. Gradio 6 (the `[demo]`
extra, pinned) is mounted here with its own API instead: `gr.mount_gradio_app` on a holder
FastAPI, whose lifespan (Gradio's queue) this module enters itself, since Serve runs only the
ingress app's.

`Gate` stands in front of every one of Gradio's routes:

    signed in      the page's cookie (`orchestrate demo NAME`) or the API's Bearer token
                   (`access.demo_authorized`); else 401, the sign-in note for the page itself
    same origin    a request that carries an `Origin` other than its `Host` is refused (403), and
                   a cookie's request that changes anything (not GET/HEAD) must carry one: no page
                   of another origin calls predict or uploads (Gradio's own CORS lets every
                   localhost origin in, and SameSite does not tell ports apart)
    allowlisted    only `ROUTES`, what the page uses, reach Gradio; the rest 404 (its API, file
                   proxy, run history, monitoring, login, vibe editor, MCP...)

The page's blocks: a table model's form (`table_blocks`), an image model's upload
(`image_blocks`), or the user's own (`demo: {app: "module:function"}`, called with the model's
predict function). Each predict is the replica's own, in process: the same rows as `/predict`.
"""
from __future__ import annotations

import importlib
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from . import access, demo_page

# What Gradio does on its own when imported or served, off before it is imported: analytics
# and its version check (network calls), server-side rendering (a Node process), an MCP server,
# the run history saved to a Hugging Face bucket.
GRADIO_ENV = {"GRADIO_ANALYTICS_ENABLED": "False", "GRADIO_SSR_MODE": "False",
              "GRADIO_MCP_SERVER": "False", "GRADIO_RUN_HISTORY": "False",
              "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
              "DO_NOT_TRACK": "1"}
MISSING = ("the demo page needs Gradio where the service runs: install orchestrate-ray[demo] "
           "(gradio=={version}) in the cluster's Python")
GRADIO_VERSION = "6.31.0"   # the `[demo]` extra's pin: ROUTES was read against this release
MAX_UPLOAD = "10mb"
FIELDS_PER_ROW = 3
API = "/gradio_api"
READS = frozenset({"GET", "HEAD"})

# (methods, path under {route}/demo) a page needs, read from gradio 6.31's routes.py and what
# Chromium asks for (tests/workload/test_demo_gate.py walks every route of the app).
ROUTES: tuple[tuple[frozenset[str], re.Pattern[str]], ...] = tuple(
    (frozenset(methods.split()), re.compile(pattern)) for methods, pattern in (
        ("GET HEAD", r"/"),                                  # the page
        ("GET", r"/config/?"),                               # its blocks, asked again on reload
        ("GET", r"/assets/[A-Za-z0-9._/-]+"),                # its script and style (the wheel's)
        ("GET", r"/static/[A-Za-z0-9._/-]+"),                # the wheel's other files
        ("GET", r"/theme\.css"),
        ("POST", API + r"/queue/join"),                      # a predict (behind the same origin)
        ("GET", API + r"/queue/data"),                       # its answer, streamed
        ("GET", API + r"/heartbeat/[A-Za-z0-9_-]+"),         # the page's session, while open
        ("POST", API + r"/upload"),                          # an image (MAX_UPLOAD at most)
        ("GET", API + r"/upload_progress"),
        ("GET HEAD", API + r"/file=.+"),                     # it shown back (Gradio's cache only)
    ))
NO_ROUTE = {"error": "not a route of the demo page"}


def allowed(method: str, path: str) -> bool:
    return any(method in methods and pattern.fullmatch(path) for methods, pattern in ROUTES)


def cross_site(method: str, headers: Mapping[str, str]) -> bool:
    """A request from a page of another origin: an `Origin` whose host and port are not the
    request's `Host`, or a change (not GET/HEAD) signed in by cookie without an `Origin`
    (browsers send one with every such request; a token holder's client needs none)."""
    origin = headers.get("origin")
    if origin is None:
        return method not in READS and "authorization" not in headers
    host = headers.get("host", "")
    scheme, _, rest = origin.partition("://")
    return scheme not in ("http", "https") or rest.rstrip("/") != host


def theme() -> Any:
    """Gradio's default theme with the system's fonts: its own loads Inter from Google Fonts."""
    import gradio as gr

    return gr.themes.Default(font=["system-ui", "-apple-system", "Segoe UI", "Roboto",
                                   "sans-serif"],
                             font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "monospace"])


Predict = Callable[[Any], Awaitable[list[dict[str, Any]]]]   # a DataFrame -> prediction rows


class Gate:
    """The ASGI app behind `{route}/demo` (`serving` forwards every request under it): the
    checks above, then the Gradio app of `configure`; 503 while there is none, naming what is
    missing."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.auth: Mapping[str, Any] = {}
        self.app: Any = None            # the holder FastAPI with Gradio mounted
        self.lifespan: Any = None       # its lifespan, entered by `configure`
        self.key: tuple[Any, ...] | None = None
        self.problem: str | None = None
        self.blocks: Any = None

    async def configure(self, auth: Mapping[str, Any], card: dict[str, Any], checkpoint: str,
                        predict: Predict, app: str | None = None) -> None:
        """The page for this model (built again only when the checkpoint or the app changes);
        the page off: `close`."""
        self.auth = auth
        if not auth.get("demo"):
            await self.close()
            return
        key = (checkpoint, app)
        if key == self.key and (self.app is not None or self.problem):
            return
        await self.close()
        self.key = key
        for name, value in GRADIO_ENV.items():
            os.environ.setdefault(name, value)
        try:
            import gradio as gr
        except ImportError:
            self.problem = MISSING.format(version=GRADIO_VERSION)
            return
        import fastapi

        blocks = user_blocks(app, predict) if app else build_blocks(card, checkpoint, predict)
        holder = fastapi.FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
        holder = gr.mount_gradio_app(holder, blocks, path="", footer_links=["settings"],
                                     run_history=False, max_file_size=MAX_UPLOAD,
                                     ssr_mode=False, mcp_server=False, pwa=False,
                                     enable_monitoring=False, theme=theme(),
                                     show_error=True)
        lifespan = holder.router.lifespan_context(holder)
        await lifespan.__aenter__()
        self.app, self.lifespan, self.blocks, self.problem = holder, lifespan, blocks, None

    async def close(self) -> None:
        lifespan, blocks = self.lifespan, self.blocks
        self.app = self.lifespan = self.blocks = self.key = self.problem = None
        if lifespan is not None:
            await lifespan.__aexit__(None, None, None)
        if blocks is not None:   # its queue's loops stop at their next turn (`launch` would
            blocks._queue.close()   # close them in `Blocks.close`, which a mounted app skips)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

        if scope["type"] != "http":   # Gradio 6 streams over HTTP; no websocket is let in
            return
        base = scope.get("root_path", "") + demo_page.PAGE_PATH
        path = scope["path"][len(base):] if scope["path"].startswith(base) else scope["path"]
        method = scope["method"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        answer: Response | None = None
        if not self.auth.get("demo"):
            answer = JSONResponse({"detail": "Not Found"}, status_code=404)
        elif cross_site(method, headers):
            answer = JSONResponse({"error": "a request from another page"}, status_code=403)
        elif not access.demo_authorized(headers, self.auth):
            if path in ("", "/") and method in READS:
                note = access.page_refused(headers, self.auth, self.name) or ""
                answer = HTMLResponse(note, status_code=401,
                                      headers=demo_page.security_headers())
            else:
                answer = JSONResponse({"error": "not signed in"}, status_code=401)
        elif path == "":
            # Gradio's page asks for its parts relative to itself: the address ends in /
            answer = RedirectResponse(demo_page.PAGE_PATH.rsplit("/", 1)[-1] + "/",
                                      status_code=307)
        elif not allowed(method, path):
            answer = JSONResponse(NO_ROUTE, status_code=404)
        elif self.problem is not None:
            answer = JSONResponse({"error": self.problem}, status_code=503)
        elif self.app is None:
            answer = JSONResponse({"error": "the model is loading"}, status_code=503)
        if answer is not None:
            await answer(scope, receive, send)
            return
        inner = {**scope, "root_path": base, "path": base + path}
        await self.app(inner, receive, demo_page.with_headers(send))


def columns(card: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(column, kind, the example row's value) for each of the model's inputs."""
    kinds = card.get("column_kinds") or {}
    example = card.get("example") or {}
    return [(c, kinds.get(c, "number"), example.get(c))
            for c in card.get("required_columns") or []]


def element_id(column: str) -> str:
    return "field-" + re.sub(r"[^A-Za-z0-9_-]", "_", column)


def title(card: dict[str, Any], checkpoint: str) -> str:
    model = (card.get("model") or {}).get("name") or card.get("trainer")
    where = checkpoint.rstrip("/").rsplit("/", 1)[-1]
    return f"{card.get('experiment')} · {model} ({card.get('trainer')}) · {where}"


def scores(card: dict[str, Any], row: dict[str, Any]) -> dict[str, float] | Any:
    """A prediction row as `gr.Label` shows it: each class's probability, or the value."""
    from . import inference

    named = {str(c): float(row[p]) for c, p in zip(card.get("class_names") or [],
                                                   inference.probability_columns(card),
                                                   strict=False) if p in row}
    return named or row[inference.PREDICTION]


def build_blocks(card: dict[str, Any], checkpoint: str, predict: Predict) -> Any:
    if card.get("image"):
        return image_blocks(card, checkpoint, predict)
    return table_blocks(card, checkpoint, predict)


def table_blocks(card: dict[str, Any], checkpoint: str, predict: Predict) -> Any:
    """One input per feature column, of its kind, prefilled from the training row the card
    keeps; Predict; the class probabilities (`gr.Label`), or a regression's number."""
    import gradio as gr
    import pandas as pd

    fields = columns(card)
    classes = bool(card.get("class_names"))
    with gr.Blocks(title=f"{card.get('experiment')}: try the model",
                   analytics_enabled=False) as blocks:
        gr.Markdown(f"## Try the model\n{title(card, checkpoint)}")
        with gr.Row():
            with gr.Column(scale=3):
                inputs = []
                for start in range(0, len(fields), FIELDS_PER_ROW):   # a long form stays short
                    with gr.Row():
                        inputs += [field(gr, name, kind, value)
                                   for name, kind, value in fields[start:start + FIELDS_PER_ROW]]
                button = gr.Button("Predict", variant="primary", elem_id="predict")
            with gr.Column(scale=2):
                output = gr.Label(label="prediction", elem_id="label") if classes else \
                    gr.Number(label="prediction", elem_id="label", interactive=False)

        async def answer(*values: Any) -> Any:
            row = {name: value for (name, _, _), value in zip(fields, values, strict=True)}
            predicted = await predict(pd.DataFrame([row]))
            return scores(card, predicted[0])

        button.click(answer, inputs, output, api_name="predict", api_visibility="private")
    return blocks


def field(gr: Any, name: str, kind: str, value: Any) -> Any:
    """A column's input: a number (an integer's in whole steps), a dropdown of true/false, or
    text."""
    common = {"label": f"{name} ({kind})", "elem_id": element_id(name)}
    if kind in ("integer", "number"):
        return gr.Number(value=value, precision=0 if kind == "integer" else None, **common)
    if kind == "boolean":
        return gr.Dropdown(choices=[True, False], value=True if value is None else value,
                           **common)
    return gr.Textbox(value="" if value is None else str(value), **common)


def image_blocks(card: dict[str, Any], checkpoint: str, predict: Predict) -> Any:
    """The seed's `gr.Interface(predict, gr.Image(), gr.Label())`: an upload, resized to the
    model's input by the replica, and its top classes."""
    import gradio as gr

    from . import rows

    with gr.Blocks(title=f"{card.get('experiment')}: try the model",
                   analytics_enabled=False) as blocks:
        gr.Markdown(f"## Try the model\n{title(card, checkpoint)}")
        with gr.Row():
            image = gr.Image(type="numpy", image_mode="RGB", label="image", elem_id="image",
                             sources=["upload"])
            output = gr.Label(label="prediction", elem_id="label",
                              num_top_classes=rows.TOP_CLASSES)
        button = gr.Button("Predict", variant="primary", elem_id="predict")

        async def answer(pixels: Any) -> Any:
            if pixels is None:
                raise gr.Error("Upload an image first.")
            try:
                predicted = await predict(rows.image_rows(pixels, card))
            except ValueError as exc:
                raise gr.Error(str(exc)) from None
            return scores(card, predicted[0])

        button.click(answer, image, output, api_name="predict", api_visibility="private")
    return blocks


def user_blocks(app: str, predict: Predict) -> Any:
    """The user's own Blocks: `module:function` from the experiment's working_dir, called with
    the model's predict function (a DataFrame -> prediction rows, awaitable)."""
    module, _, function = app.partition(":")
    built = getattr(importlib.import_module(module), function)(predict)
    import gradio as gr

    if not isinstance(built, gr.Blocks):
        raise TypeError(f"{app} returned {type(built).__name__}, not a gradio Blocks")
    return built
