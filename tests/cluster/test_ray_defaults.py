"""`up` then `run` at once, and a GitOps project's first `apply`, on hosts with Ray's default
settings (issue 48). The other tests' hosts export AUTOSCALER_UPDATE_INTERVAL_S=1 (tests/cluster/
hosts.py) so their workers join sooner; users have Ray's 5 s, and for up to 5 s after `up` the
autoscaler's load report counts only the head: a run sized by it was refused ("cluster has 2
CPUs in all") where the hosts have 4, and every first apply of a project failed that way."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from .conftest import cli_env, orchestrate

pytestmark = [pytest.mark.ssh, pytest.mark.ray]

DATA = Path(__file__).resolve().parents[2] / "experiments" / "data"


def experiment(name: str, cluster: str, storage: Path) -> dict:
    """Two workers: 3 CPUs with Ray Data's, more than the head's 2, less than the hosts' 4."""
    return {"name": name, "cluster": cluster, "trainer": "torch",
            "model": {"name": "mlp", "hidden_dims": [8], "num_classes": 2},
            "datasets": {"train": {"format": "csv", "path": "data/train.csv"}},
            "label_column": "target",
            "train_loop_config": {"lr": 0.01, "epochs": 1, "batch_size_per_worker": 64},
            "scaling_config": {"num_workers": 2},
            "run_config": {"storage_path": str(storage)}}


def folder_with_data(path: Path) -> Path:
    (path / "data").mkdir(parents=True)
    shutil.copy(DATA / "breast_cancer_train.csv", path / "data" / "train.csv")
    return path


def test_up_then_run_and_a_first_apply_on_hosts_with_rays_defaults(make_machine, tmp_path):
    machine = make_machine(count=2, options={1: {"ray_defaults": True},
                                             2: {"ray_defaults": True}})
    head = machine.hosts[0]
    assert "AUTOSCALER_UPDATE_INTERVAL_S" not in head.in_host(
        "bash --login -c -i 'source ~/.bashrc; env'", shell=True).stdout
    results = tmp_path / "results"   # every host sees this machine's /tmp (as an NFS share)
    env = cli_env(tmp_path / "home")
    names = [f"d-{machine.name}", f"p-{machine.name}"]
    try:
        # A user's `up && run`, with no pause between them.
        single = folder_with_data(tmp_path / "single")
        cluster = machine.cluster_file(names[0])
        (single / "exp.yaml").write_text(yaml.safe_dump(experiment("now", str(cluster), results)))
        up = orchestrate(env, "up", str(cluster), "-y")
        assert up.returncode == 0, up.stderr
        ran = orchestrate(env, "run", str(single / "exp.yaml"), "--format", "json")
        assert ran.returncode == 0, f"{ran.stderr}\n{ran.stdout}"
        assert "CPUs in all" not in ran.stderr
        assert json.loads(ran.stdout)["status"] == "SUCCEEDED", ran.stdout
        down = orchestrate(env, "down", names[0], "-y")
        assert down.returncode == 0, down.stderr

        # A GitOps project's first apply: the cluster comes up, the experiment runs on it.
        root = folder_with_data(tmp_path / "repo" / "experiments").parent
        (root / "clusters").mkdir()
        (root / "orchestrate.yaml").write_text(yaml.safe_dump({
            "project": "defaults", "include": ["clusters/*.yaml", "experiments/*.yaml"],
            "state": f"file://{tmp_path / 'state'}"}))
        shutil.copy(machine.cluster_file(names[1]), root / "clusters" / "c.yaml")
        (root / "experiments" / "first.yaml").write_text(
            yaml.safe_dump(experiment("first", "../clusters/c.yaml", results)))
        applied = orchestrate(env, "apply", "-y", "--wait", "--format", "json", cwd=root)
        assert applied.returncode == 0, f"{applied.stderr}\n{applied.stdout}"
        assert json.loads(applied.stdout)["results"] == {"first": "SUCCEEDED"}, applied.stdout
    finally:
        for name in names:
            if (tmp_path / "home" / "clusters" / name / "record.json").exists():
                orchestrate(env, "down", name, "-y", timeout=300, cwd=tmp_path / "repo"
                            if name == names[1] else tmp_path)
