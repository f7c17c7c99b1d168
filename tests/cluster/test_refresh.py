"""`up` asks a cluster recorded up how it is before it plans: one that does not answer is planned a
restart, which stops its jobs, so a head too busy to answer in time is asked once more, waiting
longer. Against a real dashboard-shaped HTTP server on loopback (in this process, so the token
may go to it) that is slow to answer, refuses, or is gone."""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from orchestrator.cluster import apply
from orchestrator.state import UP, ClusterRecord, cluster_key
from tests.squatters import Recorder, serving

NODES = {"data": {"result": {"result": [
    {"state": "ALIVE", "node_ip": "10.0.0.5", "resources_total": {"CPU": 4.0}}]}}}


@contextmanager
def dashboard(slow_for: float = 0.0, status: int = 200, first: int = 200) -> Iterator[Recorder]:
    """A dashboard whose first `/api/version` waits `slow_for` seconds and answers `first`; then
    every answer is `status`."""
    asked: list[str] = []

    def respond(path: str) -> tuple[int, Any]:
        asked.append(path)
        once = path == "/api/version" and asked.count(path) == 1
        if once:
            time.sleep(slow_for)
        return (first if once and first != 200 else status), \
            ({"session_name": "session_1"} if path == "/api/version"
             else NODES if path.startswith("/api/v0/nodes") else {})

    with serving(respond=respond) as recorder:
        yield recorder


def record(address: str) -> ClusterRecord:
    # a dashboard reached directly at its recorded address (no SSH forward)
    return ClusterRecord(name="c", provider="local", file="/c.yaml", config_hash="h", state=UP,
                         head_ip="10.0.0.5", dashboard_host="10.0.0.5", address=address)


@pytest.fixture
def quick(monkeypatch):
    """Tries as `up` makes them, with the waits shortened: the first answer may take 0.3 s."""
    monkeypatch.setattr(apply, "PROBE_WAITS", ((5.0, 0.3), (5.0, 5.0)))
    monkeypatch.setattr(apply, "PROBE_PAUSE_S", 0.05)


def test_a_head_slow_to_answer_is_asked_again_not_taken_for_gone(state, quick):
    state.secrets.ensure(cluster_key("c"))
    said: list[str] = []
    with dashboard(slow_for=1.0) as seen:
        health = apply.refresh(record(seen.address), state, said.append)
    assert health is not None and health.nodes_alive == 1 and health.session == "session_1"
    assert [p for _, p, _ in seen.requests].count("/api/version") == 2
    [line] = said
    assert "cluster c is recorded as up but" in line and "asking again, waiting longer" in line


@pytest.mark.parametrize("first", [500, 429])
def test_a_head_too_busy_to_ask_its_gcs_is_asked_again(state, quick, first):
    """Ray's state API answers 500 when its GCS call times out, 429 when too many are asked."""
    state.secrets.ensure(cluster_key("c"))
    said: list[str] = []
    with dashboard(first=first) as seen:
        health = apply.refresh(record(seen.address), state, said.append)
    assert health is not None and health.nodes_alive == 1
    [line] = said
    assert f"answered HTTP {first}" in line and "asking again" in line


def test_a_refusal_is_an_answer_and_not_asked_again(state, quick):
    state.secrets.ensure(cluster_key("c"))
    said: list[str] = []
    with dashboard(status=403) as seen:
        assert apply.refresh(record(seen.address), state, said.append) is None
    assert [p for _, p, _ in seen.requests] == ["/api/version"]
    [line] = said
    assert "refused our token (HTTP 403)" in line and "asking again" not in line


def test_a_head_that_is_gone_is_asked_twice_then_planned_as_gone(state, quick):
    state.secrets.ensure(cluster_key("c"))
    with dashboard() as seen:
        address = seen.address   # closed: nothing listens there any more
    said: list[str] = []
    assert apply.refresh(record(address), state, said.append) is None
    assert len(said) == 2 and "asking again" in said[0] and "asking again" not in said[1]
    assert all("does not answer" in line for line in said), said


def test_a_cluster_nothing_could_reach_is_not_asked_again(state, quick, monkeypatch):
    """No kubeconfig, an unknown context (errors.NotContacted): not a busy head."""
    from orchestrator.errors import NotContacted

    calls = []

    def not_contacted(*args, **kwargs):
        calls.append(kwargs)
        raise NotContacted("no kubeconfig at /nowhere (KUBECONFIG)")
    monkeypatch.setattr(apply, "probe_cluster", not_contacted)
    said: list[str] = []
    assert apply.refresh(record("http://10.0.0.5:8265"), state, said.append) is None
    assert len(calls) == 1 and len(said) == 1 and "asking again" not in said[0]


def test_a_head_that_refuses_this_machines_key_is_not_restarted(state, quick, monkeypatch):
    """A head whose sshd refuses this machine's key runs (another runner launched it with the
    key pair Ray's bootstrap made there): `up` stops, naming the fix, rather than plan a restart
    it could not carry out either; the head is asked once."""
    from orchestrator.errors import ClusterError, KeyRefused
    from orchestrator.launch.ray_up.head import KEY_HINT

    calls = []

    def refused(*args, **kwargs):
        calls.append(kwargs)
        raise KeyRefused("could not open an SSH port forward to the head 10.0.0.5: "
                         "ubuntu@10.0.0.5: Permission denied (publickey).", hint=KEY_HINT)
    monkeypatch.setattr(apply, "probe_cluster", refused)
    with pytest.raises(ClusterError) as raised:
        apply.refresh(record("http://10.0.0.5:8265"), state, [].append)
    assert "Permission denied" in raised.value.message and "recorded as up" in raised.value.message
    assert "auth.ssh_private_key" in (raised.value.hint or "") and len(calls) == 1
