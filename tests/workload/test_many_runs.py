"""Many runs at once on one embedded Ray (issue 31): Ray's job queue admits as many as fit, the
rest wait their turn (PENDING) instead of all starting and starving each other's Ray Data
tasks; a run that can never fit fails before anything is submitted. On the shared Ray (4 CPUs):
a 1-worker run reserves 2 CPUs (its worker and one for Ray Data), so two run at once."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from orchestrator.clients.jobs import TERMINAL, JobsClient
from orchestrator.run import needs
from orchestrator.state import State
from orchestrator.util import http, nodes

from .conftest import MLP, TABLE, cli

# The many tier (scripts/tiers.py): the runs at once are the longest ray test and mostly Ray
# starting processes. Three runs where two fit: two submitted together, then the third while
# they hold the Ray, which waits its turn and says so. Ten (before 2026-12-03) and then five
# proved nothing more: the five cost about 160 s more of the ray stage than three.
pytestmark = [pytest.mark.ray, pytest.mark.many_runs]

RUNS = 3


def small_run(index: int) -> dict:
    # no preprocessor and no validation split: each is one more Ray Data pass per run, and what
    # is tested is the queue in front of training (the deadlock of issue 31: runs that started
    # training with no CPU left for their own Ray Data tasks)
    return {"trainer": "torch", "model": MLP, "datasets": {"train": TABLE["train"]},
            "label_column": "target",
            "train_loop_config": {"lr": 0.01 + index / 1000, "epochs": 1,
                                  "batch_size_per_worker": 64},
            "scaling_config": {"num_workers": 1}}


def test_more_runs_than_fit_all_finish_never_more_running_together_than_fit(local_ray, experiment):
    paths = [experiment(f"many-{i}", **small_run(i)) for i in range(RUNS)]

    def submit(some: list) -> list[tuple[str, str]]:
        started = [subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "--detach",
                                     "--format", "json", str(path)], env=dict(os.environ),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for path in some]
        said = [process.communicate(timeout=300) for process in started]
        assert [p.returncode for p in started] == [0] * len(some), [err for _, err in said]
        return said

    # two at once (each checks the queue while the other may be submitting), then one more
    said = submit(paths[:2]) + submit(paths[2:])
    ids = [json.loads(out)["job_id"] for out, _ in said]
    assert len(set(ids)) == RUNS
    # the run submitted while two hold the Ray says it waits, and for what
    assert "queued: the run waits for 2 CPUs (1 worker x 1 CPU + 1 CPU for Ray Data)" in \
        said[-1][1], said[-1][1]

    jobs = JobsClient(local_ray.endpoint(State.here().secrets))
    cpus = nodes.totals(nodes.alive(jobs.nodes() or []))["CPU"]
    fit = int(cpus // 2)
    most = 0
    waited = False
    seen_waiting_in_runs = False
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        status = {job.submission_id: str(getattr(job.status, "value", job.status))
                  for job in jobs.list() if job.submission_id in ids}
        running = sum(1 for s in status.values() if s == "RUNNING")
        most = max(most, running)
        waited = waited or (running == fit and "PENDING" in status.values())
        if not seen_waiting_in_runs and "PENDING" in status.values():
            code, out, err = cli("runs", "--format", "json")
            assert code == 0, err
            seen_waiting_in_runs = any(row["status"] == "PENDING" and row["needs"].startswith(
                "2 CPUs") for row in json.loads(out))
        if all(s in TERMINAL for s in status.values()) and len(status) == RUNS:
            break
        time.sleep(0.5)
    assert status == {job_id: "SUCCEEDED" for job_id in ids}, {
        job_id: jobs.logs(job_id)[-2000:] for job_id, s in status.items() if s != "SUCCEEDED"}
    assert 1 <= most <= fit, most
    assert waited and seen_waiting_in_runs
    for job in jobs.list():
        if job.submission_id in ids:
            assert float(job.metadata[needs.SHARE_KEY]) * fit <= needs.HEAD_SHARE
    # the embedded Ray is one node, never preempted: Train's preemption watcher (an actor per
    # run) is not started there (embedded.ONE_NODE_SETTINGS); its controllers were
    endpoint = local_ray.endpoint(State.here().secrets)
    classes = [row["class_name"] for row in http.get_json(
        endpoint.address, "/api/v0/actors?limit=10000", endpoint.token, timeout=30)
        ["data"]["result"]["result"]]
    assert "TrainController" in classes and "PreemptionWatcher" not in classes, set(classes)
    # a 1-worker run reads its datasets itself (workload.configs.data_config): no split, so no
    # SplitCoordinator actor per dataset; its DatasetManager still hands them over
    assert "DatasetManager" in classes and "SplitCoordinator" not in classes, set(classes)
    logs = {job_id: jobs.logs(job_id) for job_id in ids}
    # the CSVs' columns were found without Ray Data's Limit[1] run, whose cancelled tasks meet
    # a race in Ray's core worker that aborted about 1 driver in 40 with two runs at once
    assert not [job_id for job_id, log in logs.items() if "LimitOperator" in log]
    # the small CSVs were read as one block each (workload.data.read_options), not split into
    # blocks that each start a task; Ray Data printed the plan of the read it ran
    assert all("ReadCSV" in log for log in logs.values())
    assert not [job_id for job_id, log in logs.items() if "SplitBlocks" in log]


def test_a_run_that_can_never_fit_fails_at_once_naming_what_it_asks_and_what_exists(
        local_ray, experiment):
    path = experiment("too-big", **{**small_run(0), "scaling_config": {"num_workers": 64}})
    before = {job.submission_id for job in JobsClient(local_ray.endpoint(
        State.here().secrets)).list()}
    code, out, err = cli("run", str(path))
    assert code == 1 and "Traceback" not in err
    line = next(line for line in err.splitlines() if line.startswith("ERROR"))
    assert f"{path}:" in line and "scaling_config.num_workers" in line, err
    assert "the run asks for 65 CPUs (64 workers x 1 CPU + 1 CPU for Ray Data), but the " \
           "embedded Ray has 4 CPUs in all" in err, err
    assert "lower scaling_config.num_workers" in err
    after = {job.submission_id for job in JobsClient(local_ray.endpoint(
        State.here().secrets)).list()}
    assert after == before   # nothing was submitted
