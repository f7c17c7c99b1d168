"""A running cluster's price (`cluster.price`, what `up` and `status` print): the workers Ray
runs by default, the hours since the cluster last came up, and a price that cannot be worked
out after a launch. No Ray, no SSH: the figures are the shipped catalog's."""
from __future__ import annotations

import pytest

from orchestrator.cluster.health import Health
from orchestrator.cluster.price import lines, running
from orchestrator.commands.up import _price
from orchestrator.providers.cost import cluster_price
from orchestrator.state import UP, ClusterRecord

HOUR = 3600.0


def aws(**more) -> dict:
    """A file naming no node types: Ray runs its defaults (m5.large, the workers spot)."""
    return {"cluster_name": "c", "max_workers": 2,
            "provider": {"type": "aws", "region": "us-west-2"}, **more}


def test_running_workers_of_ray_s_default_types_are_priced_as_its_worker_type():
    price = cluster_price(aws())
    head = price.nodes["ray.head.default"].hourly
    worker = price.nodes["ray.worker.default"].hourly
    assert head and worker and worker < head        # spot workers, an on-demand head
    # the autoscaler did not say which types run: the head and two workers are alive
    found = running(aws(), Health(nodes_alive=3, nodes_dead=0, session="s"), None)
    assert found["now"] == pytest.approx(head + 2 * worker)
    # and as the autoscaler names them
    named = Health(3, 0, "s", node_types={"ray.head.default": 1, "ray.worker.default": 2})
    assert running(aws(), named, None)["now"] == pytest.approx(head + 2 * worker)


def test_the_cost_since_up_counts_from_when_the_cluster_last_came_up():
    record = ClusterRecord("c", "aws", "/x/c.yaml", "h", created_at=1_000.0, updated_at=50_000.0)
    assert record.came_up == 50_000.0          # a record written before `up_at`: its last change
    record.up_at = 40_000.0
    assert record.came_up == 40_000.0
    assert record.as_dict()["up_at"] == 40_000.0 and record.as_dict()["created_at"] == 1_000.0
    health = Health(1, 0, "s")
    found = running(aws(), health, record.came_up, now=40_000.0 + 2 * HOUR)
    head = cluster_price(aws()).nodes["ray.head.default"].hourly
    assert found["hours_up"] == 2.0 and found["since_up"] == pytest.approx(2 * head, abs=1e-4)


def test_the_record_keeps_when_it_came_up_and_status_counts_from_it(state):
    from orchestrator.commands.status import _row

    state.store.write_cluster(ClusterRecord("c", "aws", "/x/c.yaml", "h", state=UP,
                                            created_at=1_000.0, up_at=2_000.0))
    state.store.write_rendered("c", aws())
    record = state.store.read_cluster("c")
    assert record is not None and (record.created_at, record.up_at) == (1_000.0, 2_000.0)
    live = {"reachable": True, "nodes_alive": 1, "nodes_dead": 0, "session": "s"}
    row = _row(record, state, live, None)
    assert row["up_at"] == 2_000.0 and row["created_at"] == 1_000.0   # fields added, none renamed
    head = cluster_price(aws()).nodes["ray.head.default"].hourly
    assert row["price"]["since_up"] == pytest.approx(head * row["price"]["hours_up"], rel=1e-3)
    assert row["price"]["hours_up"] < (record.updated_at - 1_000.0) / HOUR   # not since created


GPU = {"cluster_name": "g", "max_workers": 1,
       "provider": {"type": "gcp", "region": "us-central1", "availability_zone": "us-central1-a",
                    "project_id": "p"},
       "head_node_type": "head",
       "available_node_types": {
           "head": {"node_config": {"machineType": "n1-standard-4"}, "resources": {}},
           "t4": {"max_workers": 1, "resources": {}, "node_config": {
               "machineType": "n1-standard-4",
               "guestAccelerators": [{"acceleratorType": "nvidia-tesla-t4",
                                      "acceleratorCount": "two"}]}}}}


def test_up_shows_a_price_it_cannot_work_out_as_unknown_with_the_reason(state):
    """A config recorded before `acceleratorCount` was checked (or edited since): the cluster
    is up, so `up` reports it and says why the price is unknown."""
    state.store.write_rendered("g", GPU)
    record = ClusterRecord("g", "gcp", "/x/g.yaml", "h", state=UP)
    found = _price(state, record, Health(1, 0, "s"))
    assert found is not None and found["now"] is None and found["at_max"] is None
    assert found["warnings"] == ["the price could not be worked out: ValueError: invalid "
                                 "literal for int() with base 10: 'two'"]
    shown = lines(found)
    assert shown[0] == "price: unknown at min_workers, unknown at max_workers"
    assert shown[-1] == f"warning: {found['warnings'][0]}"
