"""Reaching a recorded cluster: which address, with which token, and clear errors when the
record cannot say. (The SSH forward itself runs against a real sshd in tests/cluster.)"""
from __future__ import annotations

import re

import pytest

from orchestrator.errors import ClusterError
from orchestrator.reach.endpoint import DIRECT, Endpoint, open_cluster
from orchestrator.state import UP, ClusterRecord, cluster_key


def record(**fields) -> ClusterRecord:
    return ClusterRecord(**{"name": "c", "provider": "local", "file": "/c.yaml",
                            "config_hash": "h", "state": UP, **fields})


def test_a_direct_dashboard_is_reached_at_its_recorded_address_with_the_token(state):
    token = state.secrets.ensure(cluster_key("c")).read_text()
    with open_cluster(record(head_ip="10.0.0.5", dashboard_host="10.0.0.5",
                             address="http://10.0.0.5:8265"), state) as endpoint:
        assert (endpoint.address, endpoint.via, endpoint.label) == \
            ("http://10.0.0.5:8265", DIRECT, "cluster c")
        assert endpoint.headers == {"Authorization": f"Bearer {token}"}
        assert token not in repr(endpoint)
    with open_cluster(record(head_ip="10.0.0.5", dashboard_host="0.0.0.0",
                             dashboard_port=9000), state) as endpoint:
        assert endpoint.address == "http://10.0.0.5:9000"  # no address recorded: the head's


@pytest.mark.parametrize("fields, words", [
    ({"head_ip": None, "state": "failed"}, "has no head address recorded (state: failed)"),
    ({"head_ip": "10.0.0.5", "dashboard_host": "127.0.0.1"}, "has no rendered config"),
])
def test_a_record_that_cannot_say_how_to_reach_it_is_a_clear_error(state, fields, words):
    state.secrets.ensure(cluster_key("c"))
    with pytest.raises(ClusterError, match=re.escape(words)), open_cluster(record(**fields), state):
        pass


def test_a_missing_token_is_named_not_guessed(state):
    with pytest.raises(ClusterError, match="no secret 'clusters/c' is stored"), \
            open_cluster(record(head_ip="10.0.0.5"), state):
        pass


def test_an_endpoint_without_a_token_sends_no_header():
    assert Endpoint("http://127.0.0.1:1", None, "x").headers == {}
