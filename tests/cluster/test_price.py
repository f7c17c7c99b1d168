"""A cluster's price in `up` and `status` (`cluster.price`): the workers Ray's autoscaler says
are running, priced from the shipped catalog (Ray's default worker type when the file names
none), the hours since the cluster last came up, and a price that cannot be worked out after a
launch; no Ray, no SSH (a record that is not up is not asked, so `status` prices it from its
rendered config alone)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orchestrator.api import _price
from orchestrator.cluster.health import Health
from orchestrator.cluster.price import lines, running
from orchestrator.language.cluster import load_cluster
from orchestrator.providers.cost import cluster_price
from orchestrator.providers.prices import lookup
from orchestrator.render.cluster import render_cluster
from orchestrator.state import UP, ClusterRecord, State

EXAMPLE = "cluster_configs/aws-shorthand.yaml"   # m5.2xlarge head, 0-8 spot g5.xlarge, us-west-2


def config() -> dict:
    return render_cluster(load_cluster(EXAMPLE), token_file="/t").config


def test_the_price_now_counts_the_workers_the_autoscaler_reports():
    head, spot = lookup("aws", "m5.2xlarge", "us-west-2"), \
        lookup("aws", "g5.xlarge", "us-west-2", spot=True)
    assert head and spot
    health = Health(nodes_alive=4, nodes_dead=0, session="s",
                    node_types={"head": 1, "gpu": 3})
    found = running(config(), health, since=1000.0, now=1000.0 + 2 * 3600)
    assert found["now"] == pytest.approx(head + 3 * spot)
    assert found["at_min"] == pytest.approx(head)
    assert found["at_max"] == pytest.approx(head + 8 * spot)
    # since up, at least the head and min_workers (none) for two hours
    assert found["since_up"] == pytest.approx(2 * head, abs=1e-3) and found["hours_up"] == 2
    text = "\n".join(lines(found))
    assert f"${head + 3 * spot:,.2f}/h now" in text and "list prices of" in text


def test_without_the_autoscalers_report_one_worker_type_takes_the_alive_nodes():
    head, spot = lookup("aws", "m5.2xlarge", "us-west-2"), \
        lookup("aws", "g5.xlarge", "us-west-2", spot=True)
    assert head and spot
    found = running(config(), Health(nodes_alive=3, nodes_dead=0, session="s"), since=None)
    assert found["now"] == pytest.approx(head + 2 * spot)
    assert found["since_up"] is None
    not_up = running(config(), None, since=None)
    assert not_up["now"] is None and not_up["at_max"] == pytest.approx(head + 8 * spot)


def test_status_shows_the_price_and_its_source(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    env = dict(os.environ)
    state = State.here()
    state.store.write_rendered("aws-gpu-short", config())
    state.store.write_cluster(ClusterRecord(
        name="aws-gpu-short", provider="aws", file=EXAMPLE, config_hash="x",
        state="failed", message="ray up failed"))
    done = subprocess.run([sys.executable, "-m", "orchestrator", "status", "--format", "json"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)
    at_max = row["price"]["at_max"]
    assert at_max == pytest.approx(lookup("aws", "m5.2xlarge", "us-west-2")
                                   + 8 * lookup("aws", "g5.xlarge", "us-west-2", spot=True))
    shown = subprocess.run([sys.executable, "-m", "orchestrator", "status"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert "$/H NOW (MAX)" in shown.stdout and f"- (${at_max:,.2f})" in shown.stdout
    assert "prices: list prices of" in shown.stdout


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
    from orchestrator.api import _row

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
