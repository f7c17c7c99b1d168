"""The head's watcher and archiver send the cluster's token only to a dashboard proven this
user's Ray (`head.listener`): a stranger on the port (another process of this user, or another
user's process posing as Ray's dashboard), a proxy from the environment and a redirect get
nothing, the watcher counts the head as busy and logs why, the archive's README says why.

Everything on loopback: the strangers and the proven dashboard are relays run as processes of
their own (tests/head/fake_dashboard.py), each in front of a server of this test."""
from __future__ import annotations

import json
import os
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from orchestrator.head import archive, autostop
from tests.head.conftest import NOBODY, T0, can_run_as_nobody
from tests.head.test_autostop import NO_SERVE, write_config

TOKEN = "secret-token"   # head_home's ~/.ray/auth_token


class Recorder:
    """An HTTP server on loopback that answers as an idle Ray would (no job, no Serve
    application) and records the Authorization header of every request it gets; with
    `redirect` set, it answers 302 to that URL instead."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []
        self.redirect: str | None = None
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                recorder.seen.append(self.headers.get("Authorization"))
                if recorder.redirect:
                    self.send_response(302)
                    self.send_header("Location", recorder.redirect)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps(NO_SERVE if "/api/serve/" in self.path else []).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def tokens(self) -> list[str]:
        return [seen for seen in self.seen if seen and TOKEN in seen]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorders() -> Iterator:
    made: list[Recorder] = []

    def make() -> Recorder:
        made.append(Recorder())
        return made[-1]

    yield make
    for recorder in made:
        recorder.close()


def session_with_a_log(tmp_path) -> str:
    logs = tmp_path / "session" / "logs"
    logs.mkdir(parents=True)
    (logs / "raylet.out").write_text("raylet says\n")
    return str(logs)


@pytest.mark.parametrize("kind", ["process", "user"])
def test_a_stranger_on_the_dashboard_port_gets_no_token_and_stops_no_cluster(
        kind, head_home, stops, stranger, recorders, tmp_path):
    """Another process of this user (not Ray's dashboard), or another user's process posing as
    Ray's dashboard, answering as an idle Ray: on the old code it was sent the token and its
    word stopped the cluster."""
    recorder = recorders()
    port = stranger(kind, recorder.port)
    write_config(head_home, port, {"idle_minutes": 1})
    said: list[str] = []
    memory: dict = {}
    verdicts = [autostop.poll_once(memory, now=now, log=said.append)
                for now in (T0, T0 + 600, T0 + 1200)]
    assert recorder.seen == [] and stops["down"] == []
    assert all(v is not None and not v.stop and v.idle_since is None for v in verdicts)
    why = ("another user (uid 65534) listens there" if kind == "user" else
           "a process of this user that is not Ray's dashboard listens there")
    [logged] = [line for line in said if "cannot tell" in line]   # said once, not every poll
    assert why in logged and "counts as busy" in logged
    status = json.loads(autostop.STATUS_FILE.read_text())
    assert all(item.startswith(autostop.UNSEEN) for item in status["activity"])

    written = archive.run({"cluster_name": "c1", "head_start_ray_commands": [
        f"ray start --head --dashboard-port={port}"]}, "down", {}, token=TOKEN,
        session_logs=session_with_a_log(tmp_path))
    assert recorder.seen == []
    folder = Path(written.removeprefix("file://"))
    readme = (folder / "README").read_text()
    assert f"Ray's Job API was not asked: the dashboard at 127.0.0.1:{port} is not proven " \
           f"this user's Ray: {why}; the token was not sent" in readme
    assert (folder / "session" / "raylet.out").read_text() == "raylet says\n"
    assert not any(TOKEN in line for line in said)
    assert TOKEN not in autostop.STATUS_FILE.read_text() and TOKEN not in readme


def test_the_proxy_of_the_environment_is_not_used(head_home, dashboard, recorders, tmp_path,
                                                  monkeypatch):
    ray, proxy = recorders(), recorders()
    port = dashboard(ray.port)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
    # urlopen's opener is made once a process, with the proxies of the environment then: as
    # in a watcher started with them set
    monkeypatch.setattr(urllib.request, "_opener", None)
    assert autostop.busy_jobs(port) == 0
    archive.run({"cluster_name": "c1"}, "down", {}, address=f"http://127.0.0.1:{port}",
                token=TOKEN, session_logs=session_with_a_log(tmp_path))
    assert proxy.seen == [] and ray.tokens == [f"Bearer {TOKEN}"] * 2


def test_a_redirect_is_not_followed(head_home, stops, dashboard, recorders, tmp_path):
    ray, elsewhere = recorders(), recorders()
    port = dashboard(ray.port)
    ray.redirect = f"http://127.0.0.1:{elsewhere.port}/api/jobs/"
    with pytest.raises(urllib.error.HTTPError, match="302"):
        autostop.busy_jobs(port)
    write_config(head_home, port, {"idle_minutes": 1})
    memory: dict = {}
    for now in (T0, T0 + 600):   # an answer it cannot get: busy
        verdict = autostop.poll_once(memory, now=now, log=print)
        assert verdict is not None and not verdict.stop
    written = archive.run({"cluster_name": "c1"}, "down", {},
                          address=f"http://127.0.0.1:{port}", token=TOKEN,
                          session_logs=session_with_a_log(tmp_path))
    assert "job table could not be read (HTTP Error 302" in Path(
        written.removeprefix("file://"), "README").read_text()
    assert elsewhere.seen == [] and stops["down"] == []
    assert ray.tokens and all(seen == f"Bearer {TOKEN}" for seen in ray.seen)


def test_the_server_end_of_the_connection_is_checked_once_connected(recorders, stranger):
    """Past the listener check (a listener replaced between the check and the connection):
    the connection's server end is another user's, and nothing is sent on it."""
    from orchestrator.head import listener

    if not can_run_as_nobody():
        pytest.skip("needs root and setpriv to run a listener as another user")
    recorder = recorders()
    port = stranger("user", recorder.port)
    with pytest.raises(urllib.error.URLError) as raised:
        listener.opener().open(f"http://127.0.0.1:{port}/api/jobs/", timeout=10)
    assert isinstance(raised.value.reason, listener.NotOurs)
    assert f"taken by another user (uid {NOBODY})" in str(raised.value.reason)
    assert recorder.seen == []
    with socket.create_connection(("127.0.0.1", recorder.port)) as mine:   # and ours is ours
        state, owner, _inode = listener.server_end(mine.getsockname()[:2],
                                                   mine.getpeername()[:2])
        assert (state, owner) == ("01", os.getuid())   # ESTABLISHED


def test_nothing_is_sent_where_nothing_listens_and_the_watcher_says_when_it_sees_again(
        head_home, stops, dashboard, recorders):
    from orchestrator.head import listener

    with socket.socket() as probe:   # a port nobody holds: bound, never listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        with pytest.raises(listener.NotOurs, match="nothing listens there"):
            listener.get_json(f"http://127.0.0.1:{port}", "/api/jobs/", TOKEN, 5)
        said: list[str] = []
        memory: dict = {}
        write_config(head_home, port, {"idle_minutes": 1})
        autostop.poll_once(memory, now=T0, log=said.append)
        assert "nothing listens there" in said[-1]
    with pytest.raises(listener.NotOurs, match="not the head's loopback"):
        listener.get_json("http://localhost:1", "/api/jobs/", TOKEN, 5)
    write_config(head_home, dashboard(recorders().port), {"idle_minutes": 1})
    verdict = autostop.poll_once(memory, now=T0 + 10, log=said.append)
    assert said[-1] == "the dashboard is proven this user's Ray again: idle time counts"
    assert verdict is not None and verdict.idle_since == T0 + 10


@pytest.mark.parametrize("argv, expected", [
    (["/venv/bin/python", "/venv/lib/site-packages/ray/dashboard/dashboard.py",
      "--host=127.0.0.1", "--port=8265"], True),
    (["/venv/bin/python", "-m", "memray", "run", "/x/ray/dashboard/dashboard.py"], True),
    (["/venv/bin/python", "-m", "http.server", "8265"], False),
    (["/venv/bin/python", "/x/not-ray/dashboard/dashboard.py"], False),
    (["/x/ray/dashboard/dashboard.py"], False),   # argv[0] alone: a process's own name
    ([], False),
])
def test_what_counts_as_rays_dashboard(argv, expected):
    from orchestrator.head import listener

    assert listener.is_ray_dashboard(argv) is expected
