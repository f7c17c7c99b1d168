"""Nothing that carries a token goes to a listener that is not ours, through a proxy, or across
a redirect (issue 29, points 1 and 6): real listeners on loopback, one of them in another
process, and util.http as every dashboard request uses it."""
from __future__ import annotations

import os
import socket

import pytest

from orchestrator.util import http, listeners
from orchestrator.util.relay import Relay
from tests.squatters import serving, set_proxy, squatter

TOKEN = "t0ken-for-nobody-else"


def test_a_squatter_on_the_port_gets_no_token_and_answers_is_false(tmp_path):
    """Another process holds the port we would talk to (as after a picked-then-released port
    was taken first): answers() used to send it the token and return True."""
    with squatter(tmp_path / "got") as other:
        assert not http.answers(other.address, TOKEN, "/api/jobs/")
        with pytest.raises(http.HttpError, match="no token sent") as refused:
            http.get_json(other.address, "/api/version", TOKEN)
        assert refused.value.status is None
        with pytest.raises(http.HttpError, match="no token sent"):
            http.send_json(other.address, "/api/x", TOKEN, {})
        assert TOKEN.encode() not in other.received
        assert other.received == b""          # not a byte: the check comes before connecting
        assert not listeners.ours(other.address)
        # without a token, asking whether something answers there is harmless
        assert http.answers(other.address)


def test_a_listener_of_this_process_or_a_vouched_group_is_ours(tmp_path):
    with serving() as here:
        assert listeners.ours(here.address)
        assert http.get_json(here.address, "/api/version", TOKEN)["version"] == "4"
        assert here.authorizations() == [f"Bearer {TOKEN}"]
    with squatter(tmp_path / "got") as other:
        group = os.getpgid(other.process.pid)
        assert group == os.getpgid(0)        # in our group (not a session of its own)
        listeners.vouch(other.address, group)
        try:
            assert listeners.ours(other.address)
            assert listeners.held_by([other.process.pid], other.address)
            assert listeners.listening_ports(other.process.pid) == [other.port]
        finally:
            listeners._vouched.pop(other.port, None)
        assert not listeners.ours(other.address)


def test_nothing_listening_and_a_wildcard_stranger_are_refused(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(listeners.NotOurs, match="nothing listens"):
        listeners.check(f"http://127.0.0.1:{port}")
    with serving() as here:   # ours on 127.0.0.1, a stranger on [::]: the same port
        port = int(here.address.rsplit(":", 1)[1])
        with socket.socket(socket.AF_INET6) as v6:
            v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            v6.bind(("::", port))
            v6.listen()
            assert listeners.ours(here.address)   # a v6-only socket of this process: still ours
    assert listeners.ours("http://10.0.0.5:8265")   # not loopback: not ours to judge


def test_proxy_variables_see_no_token(monkeypatch):
    """A real "proxy" listener named by every proxy variable receives nothing; the request
    goes straight to the dashboard."""
    import urllib.request

    with serving() as proxy, serving() as dashboard:
        set_proxy(monkeypatch, proxy.address)
        monkeypatch.setattr(urllib.request, "_opener", None)   # urlopen's, built from the env
        assert http.get_json(dashboard.address, "/api/version", TOKEN)["version"] == "4"
        http.send_json(dashboard.address, "/api/x", TOKEN, {"a": 1})
        assert http.answers(dashboard.address, TOKEN)
        assert http.status_of(dashboard.address + "/healthz") == 200
        assert proxy.requests == []
        assert dashboard.authorizations() == [f"Bearer {TOKEN}"] * 3


def test_a_redirect_is_not_followed_and_carries_no_token():
    """A server answering 302 to another real listener: that listener sees nothing (urllib's
    default handler used to copy Authorization across)."""
    with serving() as elsewhere, serving(redirect_to=elsewhere.address) as dashboard:
        with pytest.raises(http.HttpError) as redirected:
            http.get_json(dashboard.address, "/api/version", TOKEN)
        assert redirected.value.status == 302
        assert not http.answers(dashboard.address, TOKEN)
        assert elsewhere.requests == []
        assert dashboard.authorizations() == [f"Bearer {TOKEN}"] * 2


def test_the_relay_pipes_to_a_unix_socket_and_holds_its_port(tmp_path):
    """The relay's port is bound before anything else runs and is this process's: proven ours;
    what it carries reaches the Unix socket."""
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX) as upstream:
        upstream.bind(path)
        upstream.listen()
        with Relay(path).start() as relay:
            assert listeners.ours(f"http://127.0.0.1:{relay.port}")
            with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as client:
                conn, _ = upstream.accept()
                with conn:
                    client.sendall(b"ping")
                    assert conn.recv(4) == b"ping"
                    conn.sendall(b"pong")
                    assert client.recv(4) == b"pong"
            port = relay.port
        with socket.socket() as again:   # closed with the block (TIME_WAIT aside)
            again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            again.bind(("127.0.0.1", port))
    with squatter(tmp_path / "got") as other, pytest.raises(OSError):
        Relay(path, port=other.port)    # a port asked for and taken: an error, not a stranger


def test_the_sign_in_asks_no_stranger_for_a_cookie(tmp_path):
    """The sign-in link's request for Ray's cookie carries the token: a squatter on the
    dashboard's address is sent nothing, and the error says why."""
    from orchestrator.errors import ClusterError
    from orchestrator.reach.signin import ray_cookie

    with squatter(tmp_path / "got") as other:
        with pytest.raises(ClusterError, match="not ours.*no token sent"):
            ray_cookie(other.address, TOKEN)
        assert other.received == b""
