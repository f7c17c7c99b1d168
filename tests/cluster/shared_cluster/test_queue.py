"""Runs that together ask for more CPUs than the 3-host cluster has (issue 31): Ray's job queue
on the cluster admits as many as fit (each reserves its workers and one CPU for Ray Data), the
others wait their turn and then finish; one that can never fit fails at once, naming what it
asks for and what the cluster has. The hosts have 2 CPUs each: 6 in all."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml

from orchestrator.jobs import needs

from .test_run_experiment import write_experiment

pytestmark = [pytest.mark.ssh, pytest.mark.ray, pytest.mark.xdist_group("shared_cluster")]

RUNS = 3


def experiment(tmp_path, shared_dir, cluster_file, name: str, workers: int):
    folder = tmp_path / name
    folder.mkdir()
    path = write_experiment(folder, shared_dir, cluster_file, name)
    document = yaml.safe_load(path.read_text())
    document["scaling_config"] = {"num_workers": workers}
    document["train_loop_config"]["epochs"] = 1
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_runs_beyond_the_clusters_cpus_wait_their_turn(ssh_cluster, shared_dir, tmp_path):
    from ray.job_submission import JobSubmissionClient

    paths = [experiment(tmp_path, shared_dir, ssh_cluster.file, f"queued-{i}", 2)
             for i in range(RUNS)]
    started = [subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "--detach",
                                 "--format", "json", str(path)], env=ssh_cluster.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)
               for path in paths]
    said = [process.communicate(timeout=300) for process in started]
    assert [p.returncode for p in started] == [0] * RUNS, [err for _, err in said]
    ids = {json.loads(out)["job_id"] for out, _ in said}

    with ssh_cluster.open() as endpoint:
        client = JobSubmissionClient(endpoint.address, headers=ssh_cluster.headers)
        most, waited = 0, False
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            status = {job.submission_id: str(job.status.value) for job in client.list_jobs()
                      if job.submission_id in ids}
            running = sum(1 for s in status.values() if s == "RUNNING")
            most = max(most, running)
            waited = waited or (running == 2 and "PENDING" in status.values())
            if len(status) == RUNS and all(s in ("SUCCEEDED", "FAILED", "STOPPED")
                                           for s in status.values()):
                break
            time.sleep(1)
        failed = {job_id: client.get_job_logs(job_id)[-2000:]
                  for job_id, s in status.items() if s != "SUCCEEDED"}
        shares = [float(job.metadata[needs.SHARE_KEY]) for job in client.list_jobs()
                  if job.submission_id in ids]
    assert not failed, failed
    assert 1 <= most <= 2 and waited, (most, waited)
    # 3 CPUs of 6 each: two fit at once, three do not
    assert all(2 * share <= needs.HEAD_SHARE < 3 * share for share in shares), shares


def test_a_run_bigger_than_the_cluster_fails_at_once(ssh_cluster, shared_dir, tmp_path):
    path = experiment(tmp_path, shared_dir, ssh_cluster.file, "too-big", 8)
    done = ssh_cluster.cli("run", str(path))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "scaling_config.num_workers" in done.stderr
    assert (f"the run asks for 9 CPUs (8 workers x 1 CPU + 1 CPU for Ray Data), but cluster "
            f"{ssh_cluster.name} has 6 CPUs in all") in done.stderr, done.stderr
    assert "submitted job" not in done.stderr
