"""The `up` decision as a pure function, over a table of cases: no SSH, no Ray, no files."""
from __future__ import annotations

import copy
import json

import pytest

from orchestrator.cluster.health import Health
from orchestrator.cluster.plan import Action, Recorded, diff, only_scaling, plan_cluster
from orchestrator.render.cluster import RenderedCluster, config_hash
from orchestrator.render.harden import Dashboard
from orchestrator.state import FAILED, INTERRUPTED, LAUNCHING, UP, ClusterRecord

AWS = {
    "cluster_name": "c", "max_workers": 2,
    "provider": {"type": "aws", "region": "us-west-2"},
    "head_node_type": "head",
    "available_node_types": {
        "head": {"node_config": {"InstanceType": "m5.large"}, "resources": {}},
        "gpu": {"node_config": {"InstanceType": "g5.xlarge"}, "min_workers": 0,
                "max_workers": 2, "resources": {}},
    },
    "setup_commands": ["pip install x"],
}
LOCAL = {"cluster_name": "c", "max_workers": 2,
         "provider": {"type": "local", "head_ip": "10.0.0.1", "worker_ips": ["10.0.0.2"]}}
LIVE = Health(nodes_alive=1, nodes_dead=0, session="s1")


def changed(config: dict, path: str, value) -> dict:
    new = copy.deepcopy(config)
    *parents, last = path.split(".")
    node = new
    for key in parents:
        node = node[key]
    node[last] = value
    return new


def desired(config: dict) -> RenderedCluster:
    return RenderedCluster("c", config["provider"]["type"], "/c.yaml", config,
                           Dashboard("127.0.0.1"), expected_nodes=1)


def recorded(config: dict | None, state: str = UP, provider: str | None = None,
             hash_of: dict | None = None) -> Recorded:
    source = hash_of if hash_of is not None else config
    record = ClusterRecord(name="c", provider=provider or (config or AWS)["provider"]["type"],
                           file="/c.yaml", config_hash=config_hash(source), state=state)
    return Recorded(record, config)


CASES = [
    # id, desired config, recorded, live, action, jobs survive, asks first
    ("never launched", AWS, None, None, Action.CREATE, True, False),
    ("last up failed", AWS, recorded(AWS, FAILED), None, Action.CREATE, True, False),
    ("last up interrupted", AWS, recorded(AWS, INTERRUPTED), None, Action.CREATE, True, False),
    ("launch died half way", AWS, recorded(AWS, LAUNCHING), None, Action.CREATE, True, False),
    ("live and unchanged", AWS, recorded(AWS), LIVE, Action.NOOP, True, False),
    ("more workers", changed(AWS, "available_node_types.gpu.max_workers", 4),
     recorded(AWS), LIVE, Action.UPDATE, True, False),
    ("cluster max_workers", changed(AWS, "max_workers", 8), recorded(AWS), LIVE,
     Action.UPDATE, True, False),
    ("setup commands", changed(AWS, "setup_commands", ["pip install y"]), recorded(AWS), LIVE,
     Action.RESTART, False, True),
    ("worker instance type", changed(AWS, "available_node_types.gpu.node_config.InstanceType",
                                     "g5.2xlarge"), recorded(AWS), LIVE, Action.RESTART, False,
     True),
    # Up but silent (a refused token, a broken forward): it may still be running jobs, so ask.
    ("unchanged but not answering", AWS, recorded(AWS), None, Action.RESTART, False, True),
    ("changed and not answering", changed(AWS, "setup_commands", []), recorded(AWS), None,
     Action.RESTART, False, True),
    ("recorded config damaged", changed(AWS, "setup_commands", []),
     recorded(None, provider="aws", hash_of=AWS), LIVE, Action.RESTART, False, True),
    ("region", changed(AWS, "provider.region", "us-east-1"), recorded(AWS), LIVE,
     Action.REPLACE, False, True),
    ("head instance type", changed(AWS, "available_node_types.head.node_config.InstanceType",
                                   "m5.xlarge"), recorded(AWS), LIVE, Action.REPLACE, False,
     True),
    ("head node type renamed", changed(AWS, "head_node_type", "gpu"), recorded(AWS), LIVE,
     Action.REPLACE, False, True),
    ("provider", LOCAL, recorded(AWS), LIVE, Action.REPLACE, False, True),
    ("provider, recorded config lost", LOCAL, recorded(None, provider="aws", hash_of=AWS), None,
     Action.REPLACE, False, True),
    ("region, not answering", changed(AWS, "provider.region", "us-east-1"), recorded(AWS), None,
     Action.REPLACE, False, True),
    ("region after a failed up", changed(AWS, "provider.region", "us-east-1"),
     recorded(AWS, FAILED), None, Action.REPLACE, False, False),
    ("local head moved", changed(LOCAL, "provider.head_ip", "10.0.0.9"), recorded(LOCAL), LIVE,
     Action.REPLACE, False, True),
    ("token kept elsewhere", changed(AWS, "file_mounts", {"~/.ray/auth_token": "/new/t"}),
     recorded(changed(AWS, "file_mounts", {"~/.ray/auth_token": "/old/t"})), LIVE,
     Action.UPDATE, True, False),
    ("local worker added", changed(LOCAL, "provider.worker_ips", ["10.0.0.2", "10.0.0.3"]),
     recorded(LOCAL), LIVE, Action.UPDATE, True, False),
    # orchestrate's own settings: the head's watcher re-reads them from the synced config.
    ("autostop added", changed(AWS, "metadata", {"orchestrate": {"autostop": {"idle_minutes": 5}}}),
     recorded(AWS), LIVE, Action.UPDATE, True, False),
    ("autostop changed", changed(AWS, "metadata", {"orchestrate": {"autostop": {"idle_minutes": 9}}}),
     recorded(changed(AWS, "metadata", {"orchestrate": {"autostop": {"idle_minutes": 5}}})), LIVE,
     Action.UPDATE, True, False),
    ("autostop removed", AWS,
     recorded(changed(AWS, "metadata", {"orchestrate": {"autostop": {"idle_minutes": 5}}})), LIVE,
     Action.UPDATE, True, False),
    ("autostop and a setup command", changed(changed(AWS, "setup_commands", []), "metadata",
                                             {"orchestrate": {"archive": "file:///a"}}),
     recorded(AWS), LIVE, Action.RESTART, False, True),
    ("user metadata beside it", changed(AWS, "metadata", {"team": "x"}), recorded(AWS), LIVE,
     Action.RESTART, False, True),
    # An on-prem cluster whose head stopped itself (autostop): the record says up, Ray is silent.
    ("on-prem stopped by autostop", LOCAL, recorded(LOCAL), None, Action.RESTART, False, True),
    ("file gone", None, recorded(AWS), LIVE, Action.DESTROY, False, True),
    ("file gone, cluster silent", None, recorded(AWS), None, Action.DESTROY, False, True),
    ("file gone after a failed up", None, recorded(AWS, FAILED), None, Action.DESTROY, False,
     False),
    ("nothing at all", None, None, None, Action.NOOP, True, False),
]


@pytest.mark.parametrize("config, before, live, action, survive, asks",
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_plan_table(config, before, live, action, survive, asks):
    plan = plan_cluster(desired(config) if config is not None else None, before, live)
    assert plan.action is action, plan.reason
    assert plan.jobs_survive is survive
    assert plan.needs_confirmation is asks
    assert plan.destructive is (action in (Action.RESTART, Action.REPLACE, Action.DESTROY))
    assert plan.reason


def test_plan_lists_the_changes_and_names_what_forces_a_replacement():
    new = changed(changed(AWS, "provider.region", "eu-west-1"), "max_workers", 3)
    plan = plan_cluster(desired(new), recorded(AWS), LIVE)
    assert plan.changes == ("~ max_workers", "~ provider.region")
    assert "provider.region changed" in plan.reason and "max_workers" not in plan.reason
    assert plan.as_dict()["action"] == "replace" and plan.as_dict()["destructive"] is True


def test_plan_is_pure():
    before, config = recorded(AWS), changed(AWS, "max_workers", 5)
    snapshot = json.dumps([AWS, config], sort_keys=True)
    first = plan_cluster(desired(config), before, LIVE)
    assert plan_cluster(desired(config), before, LIVE) == first
    assert json.dumps([AWS, config], sort_keys=True) == snapshot


def test_changes_tell_scaling_from_the_rest():
    old = {"max_workers": 2, "available_node_types": {"w": {"min_workers": 0, "node_config": {
        "InstanceType": "m5.large"}}}, "setup_commands": ["pip install x"]}
    new = json.loads(json.dumps(old))
    assert config_hash(old) == config_hash(new)
    new["available_node_types"]["w"]["min_workers"] = 1
    new["max_workers"] = 4
    lines = diff(old, new)
    assert lines == ["~ available_node_types.w.min_workers", "~ max_workers"]
    assert only_scaling(lines, "aws")
    new["setup_commands"] = ["pip install y"]
    assert not only_scaling(diff(old, new), "aws")
    assert not only_scaling([], "aws")
    # The on-prem worker list is the local provider's own scaling field.
    assert only_scaling(["~ provider.worker_ips"], "local")
    assert not only_scaling(["~ provider.worker_ips"], "aws")


def test_turning_profiling_on_or_off_restarts_ray_on_the_head(tmp_path):
    """`profiling:` (issue 33) is read by the dashboard when Ray starts on the head: unlike
    orchestrate's other settings, changing it changes the head's start command, so the plan is
    a restart (running jobs die), asked first."""
    from orchestrator.language.cluster import load_cluster
    from orchestrator.render.cluster import render_cluster

    base = ("cluster_name: c\nprovider: {type: local, head_ip: 10.0.0.1, worker_ips: [10.0.0.2]}"
            "\nauth: {ssh_user: root}\n")

    def rendered(text: str) -> RenderedCluster:
        (tmp_path / "c.yaml").write_text(text)
        return render_cluster(load_cluster(tmp_path / "c.yaml", here=False), token_file="/t")

    off, on = rendered(base), rendered(base + "profiling: true\n")
    for now, before in ((on, off), (off, on)):
        plan = plan_cluster(now, recorded(before.config), LIVE)
        assert plan.action == Action.RESTART and not plan.jobs_survive, plan
        assert plan.needs_confirmation
        assert any("head_start_ray_commands" in change for change in plan.changes), plan.changes
