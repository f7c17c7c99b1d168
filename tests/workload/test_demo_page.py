"""The demo page's parts that need no Ray: the service file's switch, the cookie and who it lets
in, the model card's example row, `orchestrate demo`'s sign-in against a stand-in service on
loopback (the replica's own checks, `access.page_refused` and `demo_authorized`, behind a plain
HTTP server), and the Gradio page itself in Chromium, signed in through the one-time link
(`demo_server`: the replica's gate and page without Ray). Every route of the page's gate:
test_demo_gate.py; the page on Ray Serve: test_serve.py, test_predict.py."""
from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import http.cookiejar
import http.server
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.cli import main
from orchestrator.errors import ServeError
from orchestrator.language.service import load_service
from orchestrator.reach.signin import SignIn
from orchestrator.render import service
from orchestrator.serving import demo as serve_demo
from orchestrator.state import demo_key, service_key
from orchestrator.util.http import DIRECT
from orchestrator.workload import access, demo_page
from orchestrator.workload.access import authorized, demo_authorized
from orchestrator.workload.card import example_row
from tests.helpers import chromium

from . import demo_server

# The tests here that import Gradio (2.5-4 s), on the pytest-xdist worker of test_demo_gate.py's
# (tests/tiers.py: one group)
GRADIO = pytest.mark.xdist_group("gradio")

TOKEN, SECRET = "s3cret-api-token", "d" * 64
DIGEST = hashlib.sha256(TOKEN.encode()).hexdigest()
DEMO_DIGEST = hashlib.sha256(SECRET.encode()).hexdigest()
ON = {"auth": "token", "token_sha256": DIGEST, "demo": True, "demo_sha256": DEMO_DIGEST}


def cookie(secret: str, now: float | None = None) -> str:
    """`name=value`, as a browser sends the cookie the sign-in link sets."""
    return demo_page.cookie_header(secret, "/x", now).split(";")[0]


def user_config(tmp_path: Path, extra: str) -> dict:
    (tmp_path / "run").mkdir(exist_ok=True)
    path = tmp_path / "svc.yaml"
    path.write_text(f"name: svc\nmodel: {{run: run}}\n{extra}")
    app = service.render_application(load_service(path), checkpoint="/c", token_sha256=DIGEST,
                                     demo_sha256=DEMO_DIGEST)
    return app["deployments"][0]["user_config"]


def test_the_page_is_asked_for_and_off_by_default(tmp_path, capsys):
    on = user_config(tmp_path, "demo: true\n")
    assert on["demo"] is True and on["demo_sha256"] == DEMO_DIGEST
    for off in ("", "demo: false\n"):   # off: the config as before, nothing redeployed
        assert "demo" not in user_config(tmp_path, off)
        assert "demo_sha256" not in user_config(tmp_path, off)
    (tmp_path / "bad.yaml").write_text("name: svc\nmodel: {run: run}\ndemo: yes please\n")
    assert main(["validate", str(tmp_path / "bad.yaml")]) == 1
    err = capsys.readouterr().err
    assert "bad.yaml:3" in err and "demo" in err
    # at the root, the page's cookie would go to every web app on this host
    (tmp_path / "root.yaml").write_text("name: svc\nmodel: {run: run}\nroute_prefix: /\n"
                                        "demo: true\n")
    assert main(["validate", str(tmp_path / "root.yaml")]) == 1
    err = capsys.readouterr().err
    assert "root.yaml:3" in err and "route_prefix" in err and "demo page" in err
    (tmp_path / "root.yaml").write_text("name: svc\nmodel: {run: run}\nroute_prefix: /\n")
    assert main(["validate", str(tmp_path / "root.yaml")]) == 0


def test_the_cookie_is_an_expiring_mac_of_the_pages_secret_for_the_page_only():
    header = demo_page.cookie_header(SECRET, "/cancer", now=1_000_000)
    value = header.split(";")[0].split("=", 1)[1]
    expiry = 1_000_000 + demo_page.LIFETIME
    assert header == f"orchestrate-demo={value}; Path=/cancer/demo; HttpOnly; SameSite=Strict"
    assert "Max-Age" not in header and "Expires" not in header and "Domain" not in header
    assert value.startswith(f"{expiry}.") and SECRET not in header and DEMO_DIGEST not in header
    assert demo_page.signed_in(value, DEMO_DIGEST, now=expiry - 1) is None
    assert demo_page.signed_in(value, DEMO_DIGEST, now=expiry) == "expired"
    assert demo_page.cookie_values(f"a=1; orchestrate-demo={value}; b=2") == [value]
    # two services on nested routes: the browser sends both
    one, two = cookie("1" * 32).split("=")[1], cookie("2" * 32).split("=")[1]
    assert demo_page.cookie_values(f"{cookie('1' * 32)}; {cookie('2' * 32)}") == [one, two]
    assert demo_page.cookie_values(f"{demo_page.COOKIE}=%%%; other=x") == []
    assert demo_page.cookie_values(f"{demo_page.COOKIE}={SECRET}") == []   # the raw secret
    assert demo_page.cookie_values(None) == []


def test_who_the_cookie_lets_in():
    signed_in = {"cookie": cookie(SECRET)}
    bearer = {"authorization": f"Bearer {TOKEN}"}
    assert authorized(bearer, ON) and demo_authorized(bearer, ON)
    assert demo_authorized(signed_in, ON)          # the page and its routes (the gate checks
    assert not authorized(signed_in, ON)           # where a request comes from); never the API
    assert not authorized({"authorization": f"Bearer {SECRET}"}, ON)   # the secret is no token
    assert not demo_authorized({"authorization": f"Bearer {SECRET}"}, ON)
    assert not demo_authorized({"cookie": cookie("e" * 64)}, ON)
    again = {**ON, "demo_sha256": hashlib.sha256(b"another secret").hexdigest()}
    assert not demo_authorized(signed_in, again)   # served again with a new secret
    off = {**ON, "demo": False}   # with the page off, the cookie is worth nothing
    assert not demo_authorized(signed_in, off)
    assert authorized(bearer, off) and not demo_authorized(bearer, off)
    assert demo_authorized({}, {"auth": "none", "demo": True})
    assert not demo_authorized(signed_in, {"demo": True})     # fails closed, as the token check
    assert not demo_authorized(signed_in, {**ON, "demo_sha256": None})
    # a cookie holding the API token itself, or the page's secret itself, lets no one in
    for raw in (TOKEN, SECRET, DEMO_DIGEST):
        assert not demo_authorized({"cookie": f"{demo_page.COOKIE}={raw}"}, ON)


def test_a_sign_in_is_refused_once_expired_tampered_or_made_for_too_long():
    later = time.time() + demo_page.LIFETIME + 60   # the replica's clock, past the sign-in
    expired = {"cookie": cookie(SECRET)}
    assert demo_authorized(expired, ON)
    assert not demo_authorized(expired, ON, now=later)
    assert "has expired" in access.page_refused(expired, ON, "svc", now=later)
    value = cookie(SECRET).split("=", 1)[1]
    expiry, mac = value.split(".")
    # the expiry moved on, the MAC kept: tampered
    moved = {"cookie": f"{demo_page.COOKIE}={int(expiry) + 3600}.{mac}"}
    assert not demo_authorized(moved, ON)
    assert "is not for this service" in access.page_refused(moved, ON, "svc")
    # a MAC that is right for an expiry years on was not made by `orchestrate demo`
    far = int(time.time()) + 10 * 365 * 86400
    forged = {"cookie": f"{demo_page.COOKIE}={far}.{demo_page._mac(DEMO_DIGEST, far)}"}
    assert not demo_authorized(forged, ON)
    # one good cookie among bad ones (nested routes) lets in
    both = {"cookie": f"{moved['cookie']}; {cookie(SECRET)}"}
    assert access.page_refused(both, ON, "svc") is None
    assert "not signed in" in access.page_refused({}, ON, "svc")


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
    # read with options (a ';' CSV): this reader would read another row; none rather than wrong
    frame.to_csv(tmp_path / "semi.csv", index=False, sep=";")
    semi = {"datasets": {"train": {"format": "csv", "path": str(tmp_path / "semi.csv"),
                                   "read_options": {"parse_options": {"delimiter": ";"}}}}}
    assert example_row(semi, ["a", "b"]) == (None, {})


def served(state, name: str = "svc", *, auth: bool = True) -> None:
    """A service recorded as `orchestrate serve` leaves it, with its secrets."""
    state.store.record_service(name, {"cluster": None, "file": "/svc.yaml", "auth": auth,
                                      "url": f"http://127.0.0.1:1/{name}", "demo": True,
                                      "route_prefix": f"/{name}", "checkpoint": "/c"})
    if auth:
        state.secrets.ensure(service_key(name))
        state.secrets.ensure(demo_key(name))


def test_the_sign_in_link_sets_the_pages_cookie_and_no_token(state):
    served(state)
    secret, token = state.secrets.read(demo_key("svc")), state.secrets.read(service_key("svc"))
    base = "http://127.0.0.1:1"
    with SignIn(base, "", landing="/svc/demo", command="orchestrate demo svc",
                cookie=lambda: serve_demo.demo_cookie("svc", state)) as signin:
        opener = urllib.request.build_opener(NoRedirect())
        with pytest.raises(urllib.error.HTTPError) as answer:
            opener.open(signin.url, timeout=10)
        assert answer.value.code == 303
        assert answer.value.headers["Location"] == base + "/svc/demo"
        header = answer.value.headers["Set-Cookie"]
        name, _, rest = header.partition("=")
        value, _, flags = rest.partition(";")
        assert name == demo_page.COOKIE and flags == " Path=/svc/demo; HttpOnly; SameSite=Strict"
        assert demo_page.signed_in(value, demo_page.mac_key(secret)) is None
        assert token not in header and secret not in header
        with pytest.raises(urllib.error.HTTPError) as again:
            opener.open(signin.url, timeout=10)
        assert again.value.code == 410 and b"orchestrate demo svc" in again.value.read()


@contextlib.contextmanager
def on_loopback(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` answering on 127.0.0.1 (any port) in this process until the block ends."""
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server, \
            concurrent.futures.ThreadPoolExecutor(1) as serving_thread:
        serving_thread.submit(server.serve_forever)
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()   # serve_forever returns; the pool, then the socket, close


def status(url: str, cookie_value: str | None = None) -> tuple[int, str]:
    headers = {"Cookie": f"{demo_page.COOKIE}={cookie_value}"} if cookie_value else {}
    try:
        with DIRECT.open(urllib.request.Request(url, headers=headers), timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def signed_in_here(state, base: str) -> contextlib.AbstractContextManager[SignIn]:
    """`orchestrate demo svc`'s one-time link for the page at `base`/svc/demo/."""
    state.store.record_service("svc", {**state.store.service("svc"), "url": base + "/svc"})
    return SignIn(base, "", landing="/svc" + serve_demo.PAGE,
                  command="orchestrate demo svc",
                  cookie=lambda: serve_demo.demo_cookie("svc", state))


@GRADIO
def test_a_browser_signed_in_by_the_link_gets_the_page_but_a_copied_secret_does_not(state):
    """Over HTTP on loopback, to the replica's gate and Gradio page (`demo_server`): the
    one-time link sets the cookie in a cookie jar (as a browser keeps it, by its Path) and the
    redirect brings it to the page, which opens. The page's secret itself as the cookie (what a
    leaked cookie held before: good forever) does not open it; nor does a sign-in expired, or
    tampered with."""
    served(state)
    secret = state.secrets.read(demo_key("svc"))
    auth = {**ON, "demo_sha256": demo_page.mac_key(secret)}
    with demo_server.serving(auth=auth) as page:
        base = page.base.removesuffix("/svc")
        jar = http.cookiejar.CookieJar()
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar),
                                              urllib.request.ProxyHandler({}))
        with signed_in_here(state, base) as signin, \
                browser.open(signin.url, timeout=30) as opened:   # 303, then the page
            assert opened.status == 200 and b"gradio" in opened.read().lower()
            assert opened.url == base + "/svc/demo/"
        [kept] = list(jar)
        assert kept.name == demo_page.COOKIE and kept.path == "/svc/demo" and not kept.expires
        assert secret not in kept.value
        assert status(base + "/svc/demo/config", kept.value)[0] == 200

        code, note = status(base + "/svc/demo/", secret)   # the secret itself: refused
        assert code == 401 and "orchestrate demo svc" in note and "gradio" not in note.lower()
        assert status(base + "/svc/demo/config", secret)[0] == 401
        expired = demo_page.cookie_value(secret, now=time.time() - demo_page.LIFETIME - 60)
        code, note = status(base + "/svc/demo/", expired)
        assert code == 401 and "has expired" in note and "orchestrate demo svc" in note
        expiry, mac = kept.value.split(".")
        tampered = f"{expiry}.{mac[:-1]}{'0' if mac[-1] != '0' else '1'}"
        assert status(base + "/svc/demo/config", tampered)[0] == 401
        other = demo_page.cookie_value("another secret")   # another page's sign-in
        assert status(base + "/svc/demo/", other)[0] == 401


@GRADIO
def test_the_page_in_chromium_signed_in_fills_the_form_and_shows_the_label(state, tmp_path):
    """The Gradio page as a person meets it: the one-time link opened in Chromium, the form
    prefilled from the card's example row, a row typed in, Predict, the label read; every
    request the browser made went to loopback (Gradio's assets from its wheel, no fonts or
    analytics from the internet); the screenshot is kept (test-artifacts/demo-gradio.png)."""
    from .demo_browser import loopback_only, predict_with, screenshot

    served(state)
    secret = state.secrets.read(demo_key("svc"))
    auth = {**ON, "demo_sha256": demo_page.mac_key(secret)}
    with demo_server.serving(auth=auth) as page, chromium(tmp_path / "profile") as driver:
        base = page.base.removesuffix("/svc")
        with signed_in_here(state, base) as signin:
            driver.get(signin.url)
            shown = predict_with(driver, {"mean radius": 12.5})   # the example's is 17.99
            assert driver.current_url == base + "/svc/demo/"
        assert shown["fields"]["field-texture"] == "10"   # the example row's, kept
        assert shown["label"] == {"0": 0.9, "1": 0.1}, shown   # the typed row's answer
        (cookie,) = driver.get_cookies()
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert secret not in driver.page_source and TOKEN not in driver.page_source
        loopback_only(driver)
        screenshot(driver, "demo-gradio.png")


def test_a_sign_in_whose_service_is_gone_answers_a_page(state):
    """The cookie is made when the link is opened: a service unserved meanwhile (its record
    and secret gone) is a 502 page for the browser, not a traceback in the terminal."""
    served(state)
    with SignIn("http://127.0.0.1:1", "", landing="/svc/demo", command="orchestrate demo svc",
                cookie=lambda: serve_demo.demo_cookie("svc", state)) as signin:
        state.store.forget_service("svc")
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.build_opener(NoRedirect()).open(signin.url, timeout=10)
        assert answer.value.code == 502
        assert b"Could not sign in: no service 'svc'" in answer.value.read()
        assert "Set-Cookie" not in answer.value.headers
        assert not signin.spent


def test_a_lost_secret_is_an_error_not_an_open_page(state, capsys):
    served(state)
    state.secrets.remove(demo_key("svc"))
    state.secrets.remove(service_key("svc"))
    with pytest.raises(ServeError, match="secret of svc kept on this machine is gone") as lost:
        serve_demo.demo_cookie("svc", state)
    assert "orchestrate serve" in (lost.value.hint or "")
    assert main(["demo", "svc", "--no-browser"]) == 1
    err = capsys.readouterr().err
    assert "is gone" in err and "Traceback" not in err


@pytest.mark.parametrize("route", ["/x; Path=/", "/x\r\nSet-Cookie: a=b", "/", "", "x"])
def test_a_recorded_route_that_could_widen_the_cookie_is_refused(state, capsys, route):
    """The state may be shared: a route recorded there never reaches the cookie's header
    unless the service schema allows it (and `/` would send the cookie to every app)."""
    served(state)
    state.store.record_service("svc", {**state.store.service("svc"), "route_prefix": route,
                                       "url": "http://127.0.0.1:1/"})
    with pytest.raises(ServeError, match="cannot carry its page's cookie"):
        serve_demo.demo_cookie("svc", state)
    assert main(["demo", "svc", "--no-browser"]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_a_service_served_without_the_page_says_how_to_get_one(state, capsys):
    """A token service served without `demo: true` keeps no page secret: `demo` says to add
    the page, not that a secret is lost (serving again would not bring it back)."""
    served(state)
    state.store.record_service("svc", {**state.store.service("svc"), "demo": False})
    state.secrets.remove(demo_key("svc"))
    assert main(["demo", "svc", "--no-browser"]) == 1
    err = capsys.readouterr().err
    assert "serves no demo page" in err and "add `demo: true`" in err, err
    assert "is gone" not in err and "Traceback" not in err


class Health(http.server.BaseHTTPRequestHandler):
    """A service's `/healthz`: the scripted answers in turn, then 404 (unserved)."""
    answers: list[int] = []
    asked = 0

    def do_GET(self) -> None:  # noqa: N802
        cls = type(self)
        cls.asked += 1
        status = cls.answers.pop(0) if cls.answers else 404
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        return


def test_demo_holds_on_through_a_blip_and_gives_up_on_a_gone_service():
    Health.answers, Health.asked = [200, 503, 503, 503, 200, 502, 200], 0
    with on_loopback(Health) as base, pytest.raises(ServeError, match="stopped answering"):
        serve_demo._hold(base, every=0.01, give_up=0.3)
    assert Health.asked > 8   # every scripted answer asked, then a run of 404s


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_: object) -> None:
        return None


def test_serving_the_page_on_the_embedded_ray_without_gradio_says_which_extra(tmp_path, capsys,
                                                                             monkeypatch):
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gradio" else found(name, *a))
    (tmp_path / "run").mkdir()
    (tmp_path / "svc.yaml").write_text("name: svc\nmodel: {run: run}\ndemo: true\n")
    assert main(["serve", str(tmp_path / "svc.yaml")]) == 1
    err = capsys.readouterr().err
    assert "svc.yaml:3" in err and "orchestrate-ray[demo]" in err and "Traceback" not in err


def test_the_users_own_app_is_checked_and_rendered_with_the_working_dir(tmp_path, capsys):
    """`demo: {app: module:function}`: the form is checked where it is written; the app's name
    reaches the replica and the working_dir (uploaded by `serve`) its runtime_env."""
    (tmp_path / "run").mkdir()
    for value, why in (('"demo.build"', "module:function"), ('"a b:c"', "module:function"),
                       ("{}", "app"), ('{app: "x:y", other: 1}', "{app: module:function}")):
        (tmp_path / "bad.yaml").write_text(f"name: svc\nmodel: {{run: run}}\ndemo:\n  app: "
                                           f"{value}\n" if not value.startswith("{") else
                                           f"name: svc\nmodel: {{run: run}}\ndemo: {value}\n")
        assert main(["validate", str(tmp_path / "bad.yaml")]) == 1
        err = capsys.readouterr().err
        assert "bad.yaml:" in err and why in err and "Traceback" not in err, (value, err)
    (tmp_path / "run.yaml").write_text("name: svc\nmodel: {run: run}\ndemo: {app: 'demo:build'}\n")
    assert main(["validate", str(tmp_path / "run.yaml")]) == 1   # no experiment: no working_dir
    err = capsys.readouterr().err
    assert "run.yaml:3" in err and "working_dir" in err and "model: {experiment" in err
    (tmp_path / "data.csv").write_text("a,target\n1,0\n2,1\n")
    (tmp_path / "exp.yaml").write_text("name: exp\ntrainer: xgboost\nlabel_column: target\n"
                                       "datasets: {train: {path: data.csv}}\n")
    (tmp_path / "own.yaml").write_text("name: svc\nmodel: {experiment: exp.yaml}\n"
                                       "demo: {app: 'pages.demo:build'}\n")
    spec = load_service(tmp_path / "own.yaml")
    app = service.render_application(spec, checkpoint="/c", token_sha256=DIGEST,
                                     demo_sha256=DEMO_DIGEST, working_dir_uri="gcs://_ray_pkg_x.zip")
    config = app["deployments"][0]["user_config"]
    assert config["demo"] is True and config["demo_app"] == "pages.demo:build"
    assert app["runtime_env"]["working_dir"] == "gcs://_ray_pkg_x.zip"
    (tmp_path / "plain.yaml").write_text("name: svc\nmodel: {experiment: exp.yaml}\ndemo: true\n")
    plain = service.render_application(load_service(tmp_path / "plain.yaml"), checkpoint="/c",
                                       token_sha256=DIGEST)
    assert "working_dir" not in plain["runtime_env"]   # Gradio's own page ships nothing more
    assert "demo_app" not in plain["deployments"][0]["user_config"]


@GRADIO
def test_the_users_own_app_is_served_behind_the_gate_with_the_models_predict(tmp_path,
                                                                            monkeypatch):
    """The user's Blocks, built by their function with the replica's predict, behind the
    same sign-in."""
    (tmp_path / "mypage.py").write_text('''
import gradio as gr
import pandas as pd

def build(predict):
    build.given = predict
    async def ask(radius):
        [row] = await predict(pd.DataFrame([{"mean radius": radius}]))
        return f"class {row['prediction']} at {row['probability_1']:.2f}"
    with gr.Blocks() as blocks:
        radius = gr.Number(value=20, elem_id="radius")
        out = gr.Textbox(elem_id="said")
        gr.Button("Ask", elem_id="ask").click(ask, radius, out, api_visibility="private")
    return blocks
''')
    monkeypatch.syspath_prepend(str(tmp_path))
    with demo_server.serving(app="mypage:build") as page:
        cookie = {"Cookie": demo_page.cookie_header(demo_server.SECRET, "/svc").split(";")[0]}
        request = urllib.request.Request(page.base + "/demo/config", headers=cookie)
        with DIRECT.open(request, timeout=30) as answer:
            config = answer.read().decode()
        assert '"elem_id":"radius"' in config.replace(" ", "")
        assert status(page.base + "/demo/config")[0] == 401
    import mypage  # the user's function was handed the replica's own predict

    assert mypage.build.given is demo_server.predict
