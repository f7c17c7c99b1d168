"""Ray's launcher run as a subprocess: private logs, secrets masked."""
from __future__ import annotations

import stat
from importlib.metadata import version

import pytest
import yaml

from orchestrator.launch.ray_up import backend as launcher
from orchestrator.launch.ray_up import local_nodes


def test_launcher_logs_are_private_and_mask_secrets(tmp_path):
    log = tmp_path / "up.log"
    launcher.run_ray(["--version"], log_path=log, progress=lambda _: None, timeout=120,
                     secrets=["ray"])
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    output = log.read_text().split("\n", 2)[2]
    # Ray prints `python -m ray.scripts.scripts, version X`: the mask stands where "ray" was
    assert output == f"python -m ***.scripts.scripts, version {version('ray')}\n"


def _cluster_file(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"cluster_name": "c", "provider": {
        "type": "local", "head_ip": "10.0.0.1", "worker_ips": ["10.0.0.2", "10.0.0.3"]}}))
    return path


def _ray_reads(tmp_path):
    """The node list as Ray's own local provider reads it: ip -> (kind, state)."""
    from ray.autoscaler._private.local.node_provider import ClusterState
    from ray.autoscaler.tags import TAG_RAY_NODE_KIND

    config = yaml.safe_load(_cluster_file(tmp_path).read_text())["provider"]
    state = local_nodes.state_path(tmp_path, "c")
    nodes = ClusterState(str(state.with_suffix(".lock")), str(state), config).get()
    return {ip: (info["tags"][TAG_RAY_NODE_KIND], info["state"]) for ip, info in nodes.items()}


@pytest.mark.parametrize("cut", ["", "{\"10.0.0.1\": {\"tags\""])
def test_a_cut_node_list_is_mended_for_down_with_every_host_running(tmp_path, cut):
    # Ray rewrites the file in place: a Ctrl-C between truncate and write leaves it like this.
    local_nodes.state_path(tmp_path, "c").parent.mkdir()
    local_nodes.state_path(tmp_path, "c").write_text(cut)
    assert local_nodes.mend(tmp_path, "c", _cluster_file(tmp_path), for_teardown=True)
    assert _ray_reads(tmp_path) == {"10.0.0.1": ("head", "running"),
                                    "10.0.0.2": ("worker", "running"),
                                    "10.0.0.3": ("worker", "running")}
    assert [p.name for p in tmp_path.rglob("*mending*")] == []


def test_a_cut_node_list_is_dropped_before_up(tmp_path):
    local_nodes.state_path(tmp_path, "c").parent.mkdir()
    local_nodes.state_path(tmp_path, "c").write_text("")
    assert local_nodes.mend(tmp_path, "c", _cluster_file(tmp_path), for_teardown=False)
    assert set(_ray_reads(tmp_path).values()) == {("head", "terminated"),
                                                  ("worker", "terminated")}


def test_a_readable_or_missing_node_list_is_left_alone(tmp_path):
    assert not local_nodes.mend(tmp_path, "c", _cluster_file(tmp_path), for_teardown=True)
    assert not local_nodes.state_path(tmp_path, "c").exists()
    before = _ray_reads(tmp_path)   # Ray writes it: head and workers terminated
    text = local_nodes.state_path(tmp_path, "c").read_text()
    assert not local_nodes.mend(tmp_path, "c", _cluster_file(tmp_path), for_teardown=True)
    assert local_nodes.state_path(tmp_path, "c").read_text() == text and _ray_reads(tmp_path) == before
