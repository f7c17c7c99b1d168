"""The job queue on a cluster (issue 31): a run that can never fit fails at once, naming what it
asks for and what the cluster has (its nodes' CPUs: the hosts have 2 each, 6 in all). Runs that
fit wait their turn in the same code on one node and on many (orchestrator/run/needs.py): the
many tier proves it with three runs on the embedded Ray (tests/workload/test_many_runs.py); the
same three runs here (until 2026-12-03) took about two minutes of the ssh tier."""
from __future__ import annotations

import pytest
import yaml

from .test_run_experiment import write_experiment

pytestmark = [pytest.mark.ssh, pytest.mark.ray, pytest.mark.xdist_group("shared_cluster")]


def experiment(tmp_path, shared_dir, cluster_file, name: str, workers: int):
    folder = tmp_path / name
    folder.mkdir()
    path = write_experiment(folder, shared_dir, cluster_file, name)
    document = yaml.safe_load(path.read_text())
    document["scaling_config"] = {"num_workers": workers}
    document["train_loop_config"]["epochs"] = 1
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_a_run_bigger_than_the_cluster_fails_at_once(ssh_cluster, shared_dir, tmp_path):
    path = experiment(tmp_path, shared_dir, ssh_cluster.file, "too-big", 8)
    done = ssh_cluster.cli("run", str(path))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "scaling_config.num_workers" in done.stderr
    assert (f"the run asks for 9 CPUs (8 workers x 1 CPU + 1 CPU for Ray Data), but cluster "
            f"{ssh_cluster.name} has 6 CPUs in all") in done.stderr, done.stderr
    assert "submitted job" not in done.stderr
