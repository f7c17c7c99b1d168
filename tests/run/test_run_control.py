"""Controlling a run on the embedded local Ray: Ctrl-C while following leaves the job running
(and says how to stop it); a run stopped half way, --resume continues it from the latest
checkpoint."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.reach import embedded
from orchestrator.state import State
from orchestrator.util.waiting import until
from tests.helpers import jobs_client

pytestmark = [pytest.mark.ray]

DATA = Path(__file__).resolve().parents[2] / "experiments" / "data"

ENDLESS_LOOP = '''
import time

import ray.train


def train(config):
    for epoch in range(config["epochs"]):
        time.sleep(0.2)
        ray.train.report({"epoch": epoch + 1, "loss": 1.0 / (epoch + 1)})
'''


def write(tmp_path: Path, name: str, **document) -> Path:
    document = {"name": name, "trainer": "torch",
                "run_config": {"storage_path": str(tmp_path / "results")}, **document}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


class Follower:
    """`orchestrate run` in a subprocess, its stderr collected line by line as it comes."""

    def __init__(self, experiment: Path) -> None:
        self.lines: list[str] = []
        self.running = threading.Event()  # set at the first per-epoch progress line
        self.process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "run", str(experiment)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=dict(os.environ))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line)
            if line.startswith("» epoch"):
                self.running.set()
        self.running.set()  # the process ended: stop waiting

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.reader.join(10)


@pytest.mark.own_ray   # `stop --embedded` ends the Ray its run started
def test_ctrl_c_while_following_leaves_the_job_running(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "endless.py").write_text(ENDLESS_LOOP)
    experiment = write(tmp_path, "endless", working_dir="code", train_loop="endless:train",
                       train_loop_config={"epochs": 10**6}, scaling_config={"num_workers": 1})
    follower = Follower(experiment)
    try:
        follower.running.wait(600)  # a safety net for a hung run, not a timing assertion
        assert follower.process.poll() is None, follower.stderr
        job_id = re.search(r"submitted job (\S+) to", follower.stderr).group(1)
        jobs = jobs_client(embedded.current(State.here().secrets))  # the one the run started
        assert jobs.status(job_id) == "RUNNING"

        follower.process.send_signal(signal.SIGINT)
        assert follower.process.wait(120) == 130, follower.stderr
        follower.reader.join(10)
        message = follower.stderr
        assert f"job {job_id} keeps running" in message
        assert f"orchestrate stop {job_id}" in message
        assert "orchestrate stop --embedded" in message
        assert "Traceback" not in message
        assert jobs.status(job_id) == "RUNNING"  # the local Ray was kept for it

        # `logs -f` follows the running job until it ends (stopped, as the message says)
        logs = subprocess.Popen([sys.executable, "-m", "orchestrator", "logs", "-f", job_id],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = logs.stdout.readline()   # a line of the running job's log
            assert first and jobs.status(job_id) == "RUNNING"
            assert main(["stop", job_id]) == 0
            out, err = logs.communicate(timeout=120)
        finally:
            if logs.poll() is None:
                logs.kill()
                logs.wait()
        assert logs.returncode == 1, err   # it did not succeed
        assert err.strip() == f"job {job_id}: STOPPED"
        assert jobs._wait(job_id) == "STOPPED"
        assert main(["stop", "--local-ray"]) == 0
        assert embedded.current(State.here().secrets) is None
    finally:
        follower.close()
        embedded.shutdown(State.here().secrets)


def mlp(tmp_path: Path, epochs: int) -> Path:
    return write(tmp_path, "resumable", model={"name": "mlp", "hidden_dims": [8], "num_classes": 2},
                 datasets={"train": {"format": "csv", "path": str(DATA / "breast_cancer_train.csv")},
                           "valid": {"format": "csv", "path": str(DATA / "breast_cancer_valid.csv")}},
                 label_column="target", preprocessors=[{"type": "StandardScaler"}],
                 train_loop_config={"epochs": epochs, "batch_size_per_worker": 64},
                 scaling_config={"num_workers": 2})


def run_json(capsys, path: Path, *extra: str) -> tuple[int, dict, str]:
    code = main(["run", str(path), "--quiet", "--format", "json", *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else {}), err


def epochs(summary: dict) -> list[int]:
    return [row["epoch"] for row in json.loads(Path(summary["history"]).read_text())]


def profiled_while_it_trains(job_id: str, folder: Path, capsys) -> None:
    """Issue 33: `orchestrate profile` of the running job (the shared Ray has profiling on):
    each of its 2 Train workers' stacks and CPU flame graph, written to files, name the
    built-in torch loop (orchestrator/workload/trainers/torch.py:train_loop). Issue 51:
    `--memory` adds memray's flame graph of each worker's allocations, through the dashboard
    (memray attached by the node's agent, with gdb)."""
    capsys.readouterr()
    assert main(["profile", job_id, "--duration", "2", "--memory", "--output", str(folder),
                 "--format", "json"]) == 0, capsys.readouterr().err
    found = json.loads(capsys.readouterr().out)
    assert found["job_id"] == job_id and found["target"] == "the embedded Ray"
    assert len(found["workers"]) == 2 and not any(w["error"] for w in found["workers"])
    loop = re.compile(r"train_loop \(\S*trainers/torch\.py:\d+\)")
    for worker in found["workers"]:
        assert loop.search(Path(worker["stack"]).read_text()), Path(worker["stack"]).read_text()
    graphs = [Path(w["flamegraph"]).read_text() for w in found["workers"]]
    assert all(graph.lstrip().startswith(("<?xml", "<svg")) for graph in graphs)
    assert any(loop.search(graph) for graph in graphs)
    memories = [Path(w["memory"]).read_text() for w in found["workers"]]
    assert all(page.lstrip().lower().startswith(("<!doctype html", "<html")) for page in memories)
    # memray's flame graph carries its frames as data in the page: the loop's allocations
    assert all("train_loop" in page and "memray" in page.lower() for page in memories)
    token = local_token()
    assert not any(token in path.read_text(errors="replace") for path in folder.iterdir())


def local_token() -> str:
    return State.here().secrets.read(embedded.TOKEN_KEY)


def test_a_run_stopped_half_way_resumes_to_the_configured_epochs(local_ray, tmp_path, capsys):
    """Fault 6 of issue 11: `orchestrate stop` part way, then `run --resume` continues the same
    run from the latest checkpoint (the built-in loop reports one every epoch) up to the epochs
    the file configures now; without --resume, a new run. The first run is configured for far
    more epochs than it can reach before the stop (no race with its end); the resumed one for
    two past where it stopped."""
    from orchestrator import contract
    from orchestrator.clients.jobs import TERMINAL

    assert main(["run", str(mlp(tmp_path, epochs=10_000)), "--detach", "--format", "json"]) == 0
    job_id = json.loads(capsys.readouterr().out)["job_id"]
    jobs = jobs_client(local_ray)

    def reported() -> list[int]:
        rows = (contract.parse_epoch(line) for line in jobs.logs(job_id).splitlines())
        return [row["epoch"] for row in rows if row]

    assert until(lambda: len(reported()) >= 3 or jobs.status(job_id) in TERMINAL, timeout=600)
    profiled_while_it_trains(job_id, tmp_path / "profile", capsys)
    assert main(["stop", job_id]) == 0
    assert jobs._wait(job_id) == "STOPPED"
    done = reported()
    assert len(done) >= 3 and done == list(range(1, len(done) + 1)), done
    runs = sorted((tmp_path / "results").iterdir())
    assert len(runs) == 1, runs
    # Where a resume must start: Ray's own record of the run's latest registered checkpoint. The
    # job's log can lag it (the epoch line is printed after the checkpoint is registered, and a
    # stop can land between the two), so the log gives only a lower bound.
    snapshot = json.loads((runs[0] / "checkpoint_manager_snapshot.json").read_text())
    latest = snapshot["latest_checkpoint_result"]["metrics"]["epoch"]
    assert done[-1] <= latest, (done, latest)
    capsys.readouterr()

    target = latest + 2
    code, resumed, err = run_json(capsys, mlp(tmp_path, epochs=target), "--resume")
    assert code == 0, err
    again = [int(n) for n in re.findall(r"» epoch (\d+)\b", err)]
    assert again and again[0] > 1 and again[-1] == target, again    # not from the start
    assert again[0] == latest + 1                                 # from the latest checkpoint
    assert not re.search(r"» epoch 1\b", err)                     # restored, not retrained
    assert resumed["metrics"]["epoch"] == target
    assert resumed["run_path"] == str(runs[0])                    # the same run, continued
    assert sorted(set(epochs(resumed))) == list(range(1, target + 1))

    # Without --resume: a new job and a new run folder (seen in the job's first line; then
    # stopped, since only where it starts matters).
    assert main(["run", str(mlp(tmp_path, epochs=1)), "--detach", "--format", "json"]) == 0
    fresh = json.loads(capsys.readouterr().out)
    assert fresh["created"] is True and fresh["job_id"] != job_id

    def started_in() -> str | None:
        found = re.search(r"orchestrate: run '[^']*', storage (\S+)", jobs.logs(fresh["job_id"]))
        return found.group(1) if found else None

    assert until(lambda: started_in() or jobs.status(fresh["job_id"]) in TERMINAL, timeout=300)
    new_run = started_in()
    assert new_run is not None, jobs.logs(fresh["job_id"])
    assert new_run != resumed["run_path"] and Path(new_run).parent == runs[0].parent, new_run
    assert main(["stop", fresh["job_id"]]) == 0
