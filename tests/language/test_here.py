"""Checks that depend on this machine (a cluster's local file_mounts sources, its SSH key files)
are warnings in `validate` (a CI runner that never launches has neither) and errors in `up` and
`check` (which launch, or check a launch, from here): `load_cluster(path, here=...)`."""
import json
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.errors import SpecError
from orchestrator.language.cluster import load_cluster

CLUSTER = """\
cluster_name: elsewhere
provider: {type: local, head_ip: 127.0.0.1, worker_ips: []}
auth:
  ssh_user: ubuntu
  ssh_private_key: keys/id_ed25519
file_mounts:
  /data: ./data
"""


@pytest.fixture
def cluster(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    return path


def test_validate_warns_and_passes(cluster, capsys):
    assert main(["validate", str(cluster)]) == 0
    err = capsys.readouterr().err
    missing = "does not exist on this machine"
    assert f"WARNING {cluster}:5: auth.ssh_private_key: 'keys/id_ed25519' {missing}" in err
    assert f"WARNING {cluster}:7: file_mounts./data: local path './data' {missing}" in err
    assert "ERROR" not in err


def test_validate_json_marks_them_warnings(cluster, capsys):
    assert main(["validate", "--format", "json", str(cluster)]) == 0
    (result,) = json.loads(capsys.readouterr().out)["files"]
    assert result["valid"] and result["errors"] == []
    assert sorted(w["field"] for w in result["warnings"]) == ["auth.ssh_private_key", "file_mounts./data"]
    assert all(w["severity"] == "warning" and w["line"] for w in result["warnings"])


@pytest.mark.parametrize("command", [["up", "-y"], ["check"]])
def test_up_and_check_refuse(cluster, command, capsys, tmp_path):
    assert main([command[0], str(cluster), *command[1:]]) == 1
    err = capsys.readouterr().err
    assert "auth.ssh_private_key: 'keys/id_ed25519' does not exist on this machine" in err
    assert "file_mounts./data: local path './data' does not exist on this machine" in err
    assert "Traceback" not in err


def test_up_refuses_before_anything_is_recorded(cluster, capsys):
    import os

    assert main(["up", str(cluster), "-y"]) == 1
    home = Path(os.environ["ORCHESTRATE_HOME"])
    assert not (home / "clusters" / "elsewhere").exists()


def test_the_loader_says_which(cluster):
    with pytest.raises(SpecError) as caught:
        load_cluster(cluster, here=True)
    assert {p.severity for p in caught.value.problems} == {"error"}
    spec = load_cluster(cluster, here=False)
    assert {(w.field, w.severity) for w in spec.warnings} == {
        ("auth.ssh_private_key", "warning"), ("file_mounts./data", "warning")}


def test_files_that_exist_relative_to_the_cluster_file_pass_everywhere(cluster, monkeypatch, tmp_path):
    (cluster.parent / "keys").mkdir()
    (cluster.parent / "keys" / "id_ed25519").write_text("key")
    (cluster.parent / "data").mkdir()
    monkeypatch.chdir(tmp_path.parent)  # the caller's folder does not matter
    assert load_cluster(cluster, here=True).warnings == ()


def test_an_experiment_on_such_a_cluster_validates_with_its_warnings(cluster, tmp_path, capsys):
    experiment = tmp_path / "train.yaml"
    experiment.write_text("name: train\ntrainer: xgboost\ncluster: cluster.yaml\nlabel_column: y\n"
                          "datasets: {train: {format: csv, path: s3://bucket/train.csv}}\n")
    assert main(["validate", str(experiment)]) == 0
    assert "WARNING" in capsys.readouterr().err
