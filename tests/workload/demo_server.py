"""The demo page's Gate and Gradio app as the Serve replica serves them, without Ray: the same
`serving.forward` from `{route}/demo/...` to a `demo_app.Gate`, in a FastAPI app mounted at the
route (Serve's proxy likewise hands the ingress its route as root_path), answered by uvicorn on
127.0.0.1 in a thread of this process. The model is a stand-in whose predictions are a function
of the row, so a test can tell which row was asked."""
# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations as objects.
import asyncio
import contextlib
import hashlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

TOKEN, SECRET = "s3cret-api-token", "d" * 64
AUTH = {"auth": "token", "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest(),
        "demo": True, "demo_sha256": hashlib.sha256(SECRET.encode()).hexdigest()}
CARD = {"experiment": "cancer", "trainer": "xgboost", "model": None, "task": "classification",
        "required_columns": ["mean radius", "texture", "kind", "flag"],
        "column_kinds": {"mean radius": "number", "texture": "integer", "kind": "string",
                         "flag": "boolean"},
        "example": {"mean radius": 17.99, "texture": 10, "kind": "a", "flag": True},
        "class_names": [0, 1], "image": False, "label_column": "target"}


async def predict(frame: Any) -> list[dict[str, Any]]:
    """probability_1 rises with mean radius: 0.1 below 15, else 0.9."""
    rows = []
    for radius in frame["mean radius"]:
        p = 0.9 if float(radius) >= 15 else 0.1
        rows.append({"prediction": int(p > 0.5), "probability_0": 1 - p, "probability_1": p})
    return rows


class Served:
    def __init__(self, gate: Any, base: str, loop: asyncio.AbstractEventLoop) -> None:
        self.gate, self.base, self.loop = gate, base, loop

    def run(self, coroutine: Any) -> Any:
        """A coroutine run on the server's loop (where the Gate's Gradio lives)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(120)


@contextlib.contextmanager
def serving(card: dict[str, Any] | None = None, auth: dict[str, Any] | None = None,
            app: str | None = None, route: str = "/svc") -> Iterator[Served]:
    """The page of `card` at http://127.0.0.1:PORT{route}/demo/ until the block ends."""
    import uvicorn

    from orchestrator.util.ports import free_port
    from orchestrator.workload import demo_app
    from orchestrator.workload.serving import EVERY_METHOD, forward

    gate = demo_app.Gate("svc")
    inner = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @inner.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @inner.api_route("/demo", methods=EVERY_METHOD)
    @inner.api_route("/demo/{rest:path}", methods=EVERY_METHOD)
    async def demo(request: Request) -> Response:
        return forward(gate)  # type: ignore[no-any-return]

    outer = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    outer.mount(route, inner)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(outer, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(),),
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    served = Served(gate, f"http://127.0.0.1:{port}{route}", loop)
    try:
        served.run(gate.configure(auth or AUTH, card or CARD, "/runs/r/checkpoint_000004",
                                  predict, app))
        yield served
    finally:
        with contextlib.suppress(Exception):
            served.run(gate.close())
        server.should_exit = True
        thread.join(30)
        for task in asyncio.all_tasks(loop):   # Gradio's queue loops, stopped by close
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0.1))
        loop.close()
