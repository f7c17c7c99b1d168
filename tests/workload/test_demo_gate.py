"""The demo page's gate (`demo_app.Gate`) over every route of the Gradio app it fronts, as the
Serve replica serves it (`demo_server`: the same forwarding, uvicorn on loopback, no Ray): a
request without the sign-in is refused on every route, with it a route is Gradio's only if it is
on the allowlist, a page of another origin is refused, and no answer holds the token or the
page's secret."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.util.http import DIRECT
from orchestrator.workload import demo_app, demo_page

from .demo_server import AUTH, CARD, SECRET, TOKEN, serving

# Gradio (2.5-4 s to import) is imported by the tests that ask for `page`, not at collection (every
# pytest process collects this file); the file's tests and the page's tests of test_demo_page.py
# on one pytest-xdist worker, so one imports it.
pytestmark = pytest.mark.xdist_group("gradio")


def ask(url: str, method: str = "GET", headers: dict[str, str] | None = None,
        body: bytes | None = None) -> tuple[int, bytes]:
    data = body if body is not None else (b"{}" if method in ("POST", "PUT", "PATCH") else None)
    request = urllib.request.Request(url, data=data, method=method, headers={
        "Content-Type": "application/json", **(headers or {})})
    try:
        with DIRECT.open(request, timeout=20) as answer:
            answer.fp.raw._sock.settimeout(3)   # a stream (a heartbeat) answers, never ends
            try:
                return answer.status, answer.read() if method != "HEAD" else b""
            except TimeoutError:
                return answer.status, b"(a stream)"
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(4096)


def routes(app: Any) -> Iterator[tuple[str, str]]:
    """(method, path) of every route of the app, its mounts' and included routers' too."""
    for route in getattr(app, "routes", []):
        inner = getattr(route, "original_router", None) or getattr(route, "app", None)
        if getattr(route, "methods", None):
            for method in sorted(route.methods):
                yield method, route.path
        elif inner is not None and inner is not app:
            yield from routes(inner)


def filled(path: str) -> str:
    """A route's path with a value in each parameter."""
    return re.sub(r"\{[^}:]+(:path)?\}", lambda m: "x/y" if m[1] else "x", path)


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    pytest.importorskip("gradio", reason="the demo page's extra, orchestrate-ray[demo]")
    with serving() as served:
        yield served


def signed_in(base: str) -> dict[str, str]:
    route = "/" + base.split("/", 3)[3]
    return {"Cookie": demo_page.cookie_header(SECRET, route).split(";")[0]}


def test_every_gradio_route_is_behind_the_sign_in_and_only_the_allowlist_reaches_gradio(page):
    host = page.base.split("/")[2]
    same = {"Origin": f"http://{host}"}
    found = sorted(set(routes(page.gate.app)))
    assert ("POST", "/gradio_api/queue/join") in found and len(found) > 60   # Gradio's, read
    reached = []
    for method, path in found:
        url = page.base + demo_page.PAGE_PATH + filled(path)
        status, body = ask(url, method, same)
        assert status == 401, (method, path, status, body[:200])
        status, body = ask(url, method, {**same, **signed_in(page.base)})
        assert status != 401 and TOKEN.encode() not in body and SECRET.encode() not in body
        if demo_app.allowed(method, filled(path)):
            assert demo_app.NO_ROUTE["error"].encode() not in body, (method, path)
            reached.append((method, path))
        else:
            assert status == 404, (method, path)
            assert method == "HEAD" or json.loads(body) == demo_app.NO_ROUTE, (method, path)
    # what the page needs, and nothing of Gradio's API, proxy, files or editor
    assert ("POST", "/gradio_api/queue/join") in reached and ("GET", "/") in reached
    for refused in ("/gradio_api/proxy=", "/gradio_api/run/", "/gradio_api/call/",
                    "/gradio_api/api/", "/gradio_api/info", "/gradio_api/file/",
                    "/gradio_api/vibe", "/monitoring", "/login", "/gradio_api/mcp",
                    "/gradio_api/openapi.json", "/gradio_api/dev/reload", "/gradio_api/runs"):
        assert not [r for r in reached if r[1].startswith(refused)], refused


def test_the_bearer_token_opens_it_and_a_forged_or_expired_cookie_does_not(page):
    url = page.base + demo_page.PAGE_PATH + "/config"
    assert ask(url, headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
    assert ask(url, headers={"Authorization": f"Bearer {SECRET}"})[0] == 401
    expired = demo_page.cookie_value(SECRET, now=0)
    assert ask(url, headers={"Cookie": f"{demo_page.COOKIE}={expired}"})[0] == 401
    assert ask(url, headers={"Cookie": f"{demo_page.COOKIE}={SECRET}"})[0] == 401
    other = demo_page.cookie_value("another secret")
    assert ask(url, headers={"Cookie": f"{demo_page.COOKIE}={other}"})[0] == 401
    status, note = ask(page.base + "/demo/")   # a browser not signed in: how to sign in
    assert status == 401 and b"orchestrate demo svc" in note and b"not signed in" in note


def test_another_origin_cannot_predict_upload_or_read(page):
    """SameSite=Strict does not tell the ports of 127.0.0.1 apart: a page on another port
    sends the cookie. Its requests carry its Origin, and are refused; a change without an
    Origin is not a browser's (one sends it), and is refused too unless the token signs it."""
    cookie = signed_in(page.base)
    host = page.base.split("/")[2]
    join = page.base + "/demo/gradio_api/queue/join"
    for origin in ("http://127.0.0.1:1", "http://localhost:" + host.split(":")[1], "null",
                   f"https://{host}.evil.example"):
        assert ask(join, "POST", {**cookie, "Origin": origin})[0] == 403, origin
        assert ask(page.base + "/demo/config", "GET", {**cookie, "Origin": origin})[0] == 403
        assert ask(page.base + "/demo/gradio_api/upload", "POST",
                   {**cookie, "Origin": origin})[0] == 403
    assert ask(join, "POST", cookie)[0] == 403   # no Origin
    assert ask(join, "POST", {**cookie, "Origin": f"http://{host}"})[0] != 403
    assert ask(join, "POST", {"Authorization": f"Bearer {TOKEN}"})[0] != 403
    # and Gradio's own CORS never hears of it: no preflight is granted
    status, _ = ask(join, "OPTIONS", {**cookie, "Origin": "http://127.0.0.1:1",
                                      "Access-Control-Request-Method": "POST"})
    assert status == 403


def test_no_page_holds_the_token_or_the_secret_and_every_answer_is_hardened(page):
    headers = {**signed_in(page.base), "Authorization": f"Bearer {TOKEN}"}
    for path in ("/", "/config", "/theme.css"):
        request = urllib.request.Request(page.base + "/demo" + path, headers=headers)
        with DIRECT.open(request, timeout=30) as answer:
            body = answer.read()
            policy = answer.headers["Content-Security-Policy"]
        for secret in (TOKEN, SECRET, AUTH["token_sha256"], AUTH["demo_sha256"]):
            assert secret.encode() not in body, (path, secret)
        assert "connect-src 'self'" in policy and "frame-ancestors 'none'" in policy
    status, body = ask(page.base + "/demo/config", headers=headers)
    config = json.loads(body)
    assert config["analytics_enabled"] is False and config["version"] == demo_app.GRADIO_VERSION
    # the form: an input per column, of its kind, prefilled from the training row
    shown = {c["props"].get("elem_id"): c for c in config["components"]}
    assert shown["field-mean_radius"]["type"] == "number"
    assert shown["field-mean_radius"]["props"]["value"] == 17.99
    assert shown["field-texture"]["props"]["precision"] == 0
    assert shown["field-kind"]["type"] == "textbox"
    assert shown["field-flag"]["type"] == "dropdown"
    assert shown["label"]["type"] == "label" and "predict" in shown
    # predict is no API of Gradio's (only the page calls it, signed in)
    assert all(d.get("api_visibility") == "private" for d in config["dependencies"]
               if d.get("api_name") == "predict")


def test_the_page_off_or_gradio_missing(monkeypatch):
    with serving(auth={**AUTH, "demo": False}) as off:
        assert off.gate.app is None
        assert ask(off.base + "/demo/", headers=signed_in(off.base))[0] == 404
    monkeypatch.setitem(sys.modules, "gradio", None)   # `import gradio` fails
    with serving() as missing:
        status, body = ask(missing.base + "/demo/config", headers=signed_in(missing.base))
        assert status == 503 and b"orchestrate-ray[demo]" in body
        assert ask(missing.base + "/demo/config")[0] == 401   # the sign-in first, still


def test_serving_without_the_page_imports_no_gradio():
    code = ("import sys; import orchestrator.workload.serving, orchestrator.workload.demo_app; "
            "assert 'gradio' not in sys.modules, 'gradio imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_cross_site_rule():
    host = {"host": "127.0.0.1:8000"}
    assert not demo_app.cross_site("GET", host)
    assert not demo_app.cross_site("POST", {**host, "origin": "http://127.0.0.1:8000"})
    assert demo_app.cross_site("POST", {**host, "origin": "http://127.0.0.1:8001"})
    assert demo_app.cross_site("GET", {**host, "origin": "http://127.0.0.1:8001"})
    assert demo_app.cross_site("POST", host)
    assert not demo_app.cross_site("POST", {**host, "authorization": "Bearer x"})
    assert demo_app.cross_site("POST", {**host, "origin": "null"})
    assert demo_app.scores(CARD, {"prediction": 1, "probability_0": 0.25,
                                  "probability_1": 0.75}) == {"0": 0.25, "1": 0.75}
    assert demo_app.scores({**CARD, "class_names": None}, {"prediction": 2.5}) == 2.5
