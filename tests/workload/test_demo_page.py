"""The demo page's parts that need no Ray: the service file's switch, the cookie and who it lets
in, the page's text, the model card's example row, and `orchestrate demo`'s sign-in against a
stand-in service on loopback. The page in a browser, on Ray Serve: test_serve.py, test_predict.py."""
from __future__ import annotations

import hashlib
import http.server
import json
import re
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.cli import main
from orchestrator.errors import ServeError
from orchestrator.jobs.serve_demo import service_cookie
from orchestrator.language.service import load_service
from orchestrator.reach.signin import SignIn
from orchestrator.render import service
from orchestrator.workload import demo_page
from orchestrator.workload.card import example_row
from orchestrator.workload.serving import authorized

DIGEST = hashlib.sha256(b"s3cret").hexdigest()
ON = {"auth": "token", "token_sha256": DIGEST, "demo": True}


def cookie(token: str) -> str:
    return demo_page.cookie_header(token, "/x").split(";")[0]


def user_config(tmp_path: Path, extra: str) -> dict:
    (tmp_path / "run").mkdir(exist_ok=True)
    path = tmp_path / "svc.yaml"
    path.write_text(f"name: svc\nmodel: {{run: run}}\n{extra}")
    app = service.render_application(load_service(path), checkpoint="/c", token_sha256=DIGEST)
    return app["deployments"][0]["user_config"]


def test_the_page_is_asked_for_and_off_by_default(tmp_path, capsys):
    assert user_config(tmp_path, "demo: true\n")["demo"] is True
    for off in ("", "demo: false\n"):   # off: the config as before, nothing redeployed
        assert "demo" not in user_config(tmp_path, off)
    (tmp_path / "bad.yaml").write_text("name: svc\nmodel: {run: run}\ndemo: yes please\n")
    assert main(["validate", str(tmp_path / "bad.yaml")]) == 1
    err = capsys.readouterr().err
    assert "bad.yaml:3" in err and "demo" in err


def test_the_cookie_carries_the_token_and_is_for_the_route_only():
    header = demo_page.cookie_header("s3cret", "/cancer")
    assert "s3cret" not in header   # base64url: any token is a valid cookie value
    assert "; Path=/cancer; HttpOnly; SameSite=Strict" in header
    assert "Max-Age" not in header and "Expires" not in header and "Domain" not in header
    assert demo_page.cookie_tokens(f"a=1; {cookie('s3cret')}; b=2") == ["s3cret"]
    # two services on nested routes: the browser sends both
    assert demo_page.cookie_tokens(f"{cookie('one')}; {cookie('two')}") == ["one", "two"]
    assert demo_page.cookie_tokens(f"{demo_page.COOKIE}=%%%; other=x") == []
    assert demo_page.cookie_tokens(None) == []


def test_who_the_cookie_lets_in():
    signed_in = {"cookie": cookie("s3cret")}
    script = {**signed_in, demo_page.HEADER: "1"}
    assert authorized({"authorization": "Bearer s3cret"}, ON)
    assert authorized(signed_in, ON, page=True)              # the page: a navigation
    assert authorized(script, ON)                            # its script's requests
    assert not authorized(signed_in, ON)   # an API request with the cookie alone: another
    # origin's form or script could make it (SameSite does not tell ports apart)
    assert not authorized({"cookie": cookie("wrong"), demo_page.HEADER: "1"}, ON, page=True)
    off = {**ON, "demo": False}   # with the page off, the cookie is worth nothing
    assert not authorized(script, off) and not authorized(signed_in, off, page=True)
    assert authorized({"authorization": "Bearer s3cret"}, off)
    assert authorized({}, {"auth": "none", "demo": True}, page=True)
    assert not authorized(script, {"demo": True})           # fails closed, as the token check


def test_the_page_holds_the_card_and_nothing_runs_but_its_own_script():
    card = {"experiment": "x</script><script>alert(1)</script>", "trainer": "xgboost",
            "model": None, "required_columns": ["a", "b"], "column_kinds": {"a": "integer"},
            "example": {"a": 3, "b": None}, "class_names": [0, 1], "task": "classification",
            "image": False}
    text = demo_page.page(card, "/runs/r/checkpoint_000004/", "svc", "N0NCE")
    assert "<script>alert" not in text and "&lt;/script&gt;" in text
    assert re.findall(r"<script[^>]*>", text) == ['<script type="application/json" id="settings">',
                                                  '<script nonce="N0NCE">']
    data = json.loads(re.search(r'id="settings">(.*?)</script>', text, re.S)[1])
    assert data["columns"] == [{"name": "a", "kind": "integer", "example": 3},
                               {"name": "b", "kind": "number", "example": None}]
    assert data["checkpoint"] == "checkpoint_000004" and not data["image"]
    assert not re.search(r"(src|href)=|//|@import|url\(", re.sub(r"\n\s*//[^\n]*|\s//[^\n]*",
                                                                  "", text))   # no asset at all
    policy = demo_page.security_headers("N0NCE")["Content-Security-Policy"]
    assert "script-src 'nonce-N0NCE'" in policy and "connect-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    image = {"experiment": "v", "trainer": "torch", "model": {"name": "vit", "args": {}},
             "required_columns": ["image"], "class_names": list(range(10)), "image": True}
    assert demo_page.settings(image, "/c", "svc")["image_size"] == 224   # the ViT's default
    note = demo_page.signed_out("svc", "Your browser is not signed in.")
    assert "orchestrate demo svc" in note and "not signed in" in note


def test_the_card_keeps_the_first_row_and_the_kinds(tmp_path):
    frame = pd.DataFrame({"a": [1, 2], "b": [float("nan"), 2.5], "c": ["x", "y"],
                          "d": [True, False], "target": [0, 1]})
    frame.to_csv(tmp_path / "t.csv", index=False)
    frame.to_parquet(tmp_path / "t.parquet")
    for fmt, name in (("csv", "t.csv"), ("parquet", "t.parquet")):
        config = {"datasets": {"train": {"format": fmt, "path": str(tmp_path / name)}}}
        example, kinds = example_row(config, ["a", "b", "c", "d"])
        assert example == {"a": 1, "b": None, "c": "x", "d": True}, fmt   # JSON has no NaN
        assert kinds == {"a": "integer", "b": "number", "c": "string", "d": "boolean"}
    gone = {"datasets": {"train": {"format": "csv", "path": str(tmp_path / "gone.csv")}}}
    assert example_row(gone, ["a"]) == (None, {})   # optional: the card is written without
    numpy = {"datasets": {"train": {"format": "numpy", "path": str(tmp_path)}}}
    assert example_row(numpy, ["a"]) == (None, {})


class StandIn(http.server.BaseHTTPRequestHandler):
    """A service's `POST {route}/sign-in` as `workload.serving` answers it, or not."""
    answer: tuple[int, str | None] = (204, None)

    def do_POST(self) -> None:  # noqa: N802
        status, header = self.answer
        if self.headers.get("Authorization") != "Bearer s3cret":
            status, header = 401, None
        self.send_response(status)
        if header:
            self.send_header("Set-Cookie", header)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        return


@pytest.fixture
def stand_in():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_the_sign_in_link_hands_on_the_services_cookie(stand_in):
    server, base = stand_in
    good = demo_page.cookie_header("s3cret", "/svc")
    server.RequestHandlerClass.answer = (204, good)
    assert service_cookie(base, "/svc", "s3cret") == good
    with pytest.raises(ServeError, match="refused the recorded token"):
        service_cookie(base, "/svc", "wrong")
    for bad in ("orchestrate-service-token=x; Path=/svc",                 # not HttpOnly
                "orchestrate-service-token=x; Domain=example.com; HttpOnly", "other=x; HttpOnly"):
        server.RequestHandlerClass.answer = (204, bad)
        with pytest.raises(ServeError, match="unexpected cookie"):
            service_cookie(base, "/svc", "s3cret")
    server.RequestHandlerClass.answer = (404, None)
    with pytest.raises(ServeError, match="serves no demo page"):
        service_cookie(base, "/svc", "s3cret")

    server.RequestHandlerClass.answer = (204, good)
    with SignIn(base, "s3cret", landing="/svc/demo", command="orchestrate demo svc",
                cookie=lambda: service_cookie(base, "/svc", "s3cret")) as signin:
        opener = urllib.request.build_opener(NoRedirect())
        with pytest.raises(urllib.error.HTTPError) as answer:
            opener.open(signin.url, timeout=10)
        assert answer.value.code == 303
        assert answer.value.headers["Location"] == base + "/svc/demo"
        assert answer.value.headers["Set-Cookie"] == good
        with pytest.raises(urllib.error.HTTPError) as again:
            opener.open(signin.url, timeout=10)
        assert again.value.code == 410 and b"orchestrate demo svc" in again.value.read()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_: object) -> None:
        return None
