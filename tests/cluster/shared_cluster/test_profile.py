"""Issue 33 on the simulated hosts: `orchestrate profile` of a run training on the cluster
(its file says `profiling: true`): each Train worker, on two different hosts, is profiled by
its own node's dashboard agent, and its stack and CPU flame graph name the training loop."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from orchestrator import contract
from orchestrator.cli import main
from orchestrator.util.waiting import until
from tests.helpers import chromium, read_json_object, stop

from .test_hands import wait_for_text

pytestmark = [pytest.mark.ssh, pytest.mark.ray, pytest.mark.xdist_group("shared_cluster")]

# Busy on the CPU (a flame graph of a sleeping loop is empty) until the job is stopped.
LOOP = '''
import time

import ray.train


def busy_training_loop(config):
    for epoch in range(config["epochs"]):
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            sum(i * i for i in range(2000))
        ray.train.report({"epoch": epoch + 1, "loss": 1.0 / (epoch + 1)})
'''


def through_the_dashboard(ssh_cluster, worker: dict, tmp_path: Path) -> str:
    """A worker's stack as the dashboard's Stack Trace link shows it (`/worker/traceback`), in
    Chromium signed in by `orchestrate dashboard`'s link; the page's text."""
    import signal
    import subprocess
    import sys

    from orchestrator.util.ports import free_port

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "dashboard", ssh_cluster.name, "--port", str(port),
         "--no-browser", "--format", "json"], env=ssh_cluster.env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        report = read_json_object(process)
        with chromium(tmp_path / "browser") as browser:
            browser.get(report["sign_in_url"])
            assert until(lambda: browser.current_url.startswith(report["url"]), timeout=30)
            browser.get(f"{report['url']}/worker/traceback?pid={worker['pid']}"
                        f"&node_id={worker['node_id']}&native=0")
            return wait_for_text(browser, lambda text: "busy_training_loop" in text, 60)
    finally:
        stop(process, signal.SIGTERM)


def test_a_training_workers_profile_names_its_loop(ssh_cluster, shared_dir, tmp_path, capsys,
                                                   monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    (code / "busy.py").write_text(LOOP)
    experiment = tmp_path / "busy.yaml"
    experiment.write_text(yaml.safe_dump({
        "name": "busy", "cluster": str(ssh_cluster.file), "trainer": "torch",
        "working_dir": "code", "train_loop": "busy:busy_training_loop",
        "train_loop_config": {"epochs": 10_000},
        "scaling_config": {"num_workers": 2, "placement_strategy": "STRICT_SPREAD"},
        "run_config": {"storage_path": str(shared_dir / "results")}}))
    monkeypatch.setenv("ORCHESTRATE_HOME", str(ssh_cluster.home))
    assert main(["run", str(experiment), "--detach", "--format", "json"]) == 0, \
        capsys.readouterr().err
    job_id = json.loads(capsys.readouterr().out)["job_id"]
    try:
        def training() -> bool:
            main(["logs", job_id])
            return any(contract.parse_epoch(line) for line in capsys.readouterr().out.splitlines())

        assert until(training, timeout=300, interval=2)
        folder = tmp_path / "profile"
        assert main(["profile", job_id, "--duration", "2", "--output", str(folder),
                     "--format", "json"]) == 0, capsys.readouterr().err
        found = json.loads(capsys.readouterr().out)
        shown = through_the_dashboard(ssh_cluster, found["workers"][0], tmp_path)
    finally:
        main(["stop", job_id])

        def ended() -> bool:   # before shared_dir goes: a stopping job still writes its metrics
            main(["jobs", "--cluster", ssh_cluster.name, "--format", "json"])
            rows = json.loads(capsys.readouterr().out or "[]")
            return any(r["job_id"] == job_id and r["status"] in ("STOPPED", "SUCCEEDED", "FAILED")
                       for r in rows)

        until(ended, timeout=120, interval=2)
    # the dashboard's own Stack Trace view, in a browser `orchestrate dashboard` signed in
    assert re.search(r"busy_training_loop \(\S*busy\.py:\d+\)", shown), shown[:2000]
    assert found["target"] == f"cluster {ssh_cluster.name}"
    workers = found["workers"]
    assert len(workers) == 2 and len({w["node_id"] for w in workers}) == 2, workers
    assert not any(w["error"] for w in workers), workers
    loop = re.compile(r"busy_training_loop \(\S*busy\.py:\d+\)")
    for worker in workers:
        stack = Path(worker["stack"]).read_text()
        assert loop.search(stack), stack
        graph = Path(worker["flamegraph"]).read_text()
        assert graph.lstrip().startswith(("<?xml", "<svg")) and loop.search(graph), graph[:500]
    assert not any(ssh_cluster.token in p.read_text(errors="replace") for p in folder.iterdir())
