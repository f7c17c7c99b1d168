"""A cluster's price in `up` and `status` (`cluster.price`): the workers Ray's autoscaler says
are running, priced from the shipped catalog; no Ray, no SSH (a record that is not up is not
asked, so `status` prices it from its rendered config alone)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orchestrator.cluster.health import Health
from orchestrator.cluster.price import lines, running
from orchestrator.language.cluster import load_cluster
from orchestrator.providers.prices import lookup
from orchestrator.render.cluster import render_cluster
from orchestrator.state import ClusterRecord, State

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
