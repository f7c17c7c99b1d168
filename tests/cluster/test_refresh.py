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
def dashboard(slow_for: float = 0.0, status: int = 200) -> Iterator[Recorder]:
    """A dashboard whose first `/api/version` waits `slow_for` seconds."""
    asked: list[str] = []

    def respond(path: str) -> tuple[int, Any]:
        asked.append(path)
        if path == "/api/version" and asked.count(path) == 1:
            time.sleep(slow_for)
        return status, ({"session_name": "session_1"} if path == "/api/version"
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


def test_a_head_slow_to_answer_is_asked_again_not_taken_for_gone(state, quick):
    state.secrets.ensure(cluster_key("c"))
    said: list[str] = []
    with dashboard(slow_for=1.0) as seen:
        health = apply.refresh(record(seen.address), state, said.append)
    assert health is not None and health.nodes_alive == 1 and health.session == "session_1"
    assert [p for _, p, _ in seen.requests].count("/api/version") == 2
    [line] = said
    assert "cluster c is recorded as up but" in line and "asking again, waiting up to 5 s" in line


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
