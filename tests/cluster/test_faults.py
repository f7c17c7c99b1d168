"""Real faults on simulated hosts (tests/cluster/hosts.py), each end to end with the user's own
cluster file: machines that die or drop off the network while training, while `run` follows a
job, during `up` and during `down`; `up` killed while it writes state, and two `up`s at once.

One module-wide set of three hosts; each test leaves them running and reachable, with no cluster
on them, for the next. The hosts' login shell sets Ray's GCS health check to 1 s periods and
2 s timeouts (Ray reads `RAY_health_check_*` from the environment of `ray start`): a host gone
silent is then declared dead after about 15 s instead of Ray's default of about 65 s (5 missed
checks, 10 s timeout each, 3 s apart). What is tested is unchanged; the cluster file is still
cluster_configs/local.yaml with only addresses and key filled in (and, for the head's death,
only two of the hosts: `head_and_one_worker`).
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.util.waiting import until

from .conftest import cli_env, orchestrate

pytestmark = [pytest.mark.ssh, pytest.mark.ray]

DATA = Path(__file__).resolve().parents[2] / "experiments" / "data"


# Ray's defaults: initial delay 5 s, period 3 s, timeout 10 s, 5 failures (ray_config_def.h).
# A 2 s timeout: the many tier runs beside these tests (scripts/tiers.py), and a GCS busy for a
# second must not declare a live node dead.
FAST_NODE_LOSS = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "2000"}

# The waits below are safety nets for a hang, not times asserted: each reports what the run
# printed and the end of its job's log. They are long because these runs share the machine with
# the other ssh worker and the many tier: on a machine a third slower than the development one
# (simulated: a CPU cgroup at 1.5 of its 2 cores), the first run took 80 s to start its three
# workers and its first epoch came after more than 300 s, and the whole test passed the tier's
# 600 s limit per test (which once ended it in CI with nothing shown). Each long test gets a
# limit above the sum of its waits' usual times, so its own waits report first.
FIRST_EPOCH_S = 600     # from `run` to its first epoch
RUN_END_S = 900         # from a fault to the run's end
LONG_TEST_S = 2400      # pytest-timeout's limit for the two long tests


@pytest.fixture(scope="module")
def machine(make_machine):
    return make_machine(options={i: {"environment": FAST_NODE_LOSS} for i in (1, 2, 3)})


@pytest.fixture
def env(tmp_path, machine):
    env = {**cli_env(tmp_path / "home"), "AUTOSCALER_NODE_START_WAIT_S": "15"}
    yield env
    # Whatever a test did to the hosts, the next one finds them all up and connected, and a
    # test that failed before its own `down` leaves no cluster behind.
    for host in machine.hosts:
        if host.init_pid() is None:
            host.start()
        host.restore()
    for record in sorted((tmp_path / "home" / "clusters").glob("*/record.json")):
        orchestrate(env, "down", record.parent.name, "-y", timeout=300)


def up(env, machine, name: str, *extra: str, **overrides) -> subprocess.CompletedProcess:
    path = machine.cluster_file(name, **overrides)
    return orchestrate(env, "up", str(path), "-y", "--skip-preflight", *extra, timeout=600)


def status_of(env, name: str) -> dict:
    done = orchestrate(env, "status", "--format", "json", timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [row for row in json.loads(done.stdout) if row["name"] == name]
    return rows[0] if rows else {}


def experiment(tmp_path: Path, cluster: Path, name: str, *, epochs: int, max_failures: int) -> Path:
    """An MLP run over a CSV big enough that an epoch takes seconds (about two on an idle
    machine: 27,000 rows in batches of 64 per worker; in batches of 16 it took 6-9 s and most of
    the test's 350 CPU-s), three torch workers spread over the hosts (one per host on three), a
    checkpoint every epoch (the built-in loop reports one each epoch)."""
    shared = tmp_path / "shared"
    shared.mkdir(exist_ok=True)
    lines = (DATA / "breast_cancer_train.csv").read_text().splitlines()
    (shared / "train.csv").write_text("\n".join([lines[0], *lines[1:] * 60]) + "\n")
    document = {
        "name": name,
        "cluster": str(cluster),
        "trainer": "torch",
        "model": {"name": "mlp", "hidden_dims": [64, 64], "num_classes": 2},
        "datasets": {"train": {"format": "csv", "path": str(shared / "train.csv")},
                     "valid": {"format": "csv", "path": str(DATA / "breast_cancer_valid.csv")}},
        "label_column": "target",
        "preprocessors": [{"type": "StandardScaler"}],
        "train_loop_config": {"lr": 0.01, "epochs": epochs, "batch_size_per_worker": 64},
        "scaling_config": {"num_workers": 3, "placement_strategy": "SPREAD",
                           "resources_per_worker": {"CPU": 1}},
        "run_config": {"storage_path": str(shared / "results"),
                       "checkpoint_config": {"num_to_keep": 2},
                       "failure_config": {"max_failures": max_failures}},
    }
    # The file in a folder of its own: that folder is the job's working_dir, which Ray ships to
    # every host; the data is read from the shared folder, and ORCHESTRATE_HOME stays out.
    folder = tmp_path / "experiments"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


class Run:
    """`orchestrate run` in the background, its stderr read line by line as it comes. A run
    that does not end in time is stopped and reported with what it printed and the end of its
    job's whole log (`story`), as is every assertion about it that fails."""

    def __init__(self, env, path: Path, *args: str) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "run", str(path), "--format", "json", *args],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def epochs(self) -> list[int]:
        """The epoch numbers `run` printed, in order (`» epoch 3  loss ...`)."""
        found = (re.search(r"» .*\bepoch (\d+)", line) for line in list(self.lines))
        return [int(match.group(1)) for match in found if match]

    def story(self, lines: int = 120) -> str:
        """What `run` printed, and the end of the job's whole log, which `run` names."""
        said = list(self.lines)
        logs = [m.group(1) for m in (re.search(r"the job's whole log: (\S+\.log)", line)
                                     for line in said) if m]
        job = Path(logs[0]).read_text(errors="replace").splitlines()[-lines:] \
            if logs and Path(logs[0]).exists() else ["(no log named yet)"]
        return "\n".join(["--- what `run` printed", *said[-lines:],
                          f"--- the end of the job's whole log ({logs[0] if logs else '-'})",
                          *job])

    def until(self, condition, timeout: float, what: str) -> None:
        """Wait for `condition` (or the run's end); AssertionError with the story if not."""
        if not until(lambda: condition() or self.process.poll() is not None, timeout=timeout):
            raise AssertionError(f"{what}: not within {timeout:.0f} s\n{self.story()}")

    def wait(self, timeout: float) -> tuple[int, dict | None, str]:
        try:
            self.process.wait(timeout)   # not communicate(): the reader thread owns stderr
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self._reader.join(10)
            raise AssertionError(f"`run` did not end within {timeout:.0f} s\n{self.story()}") \
                from None
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        stdout = self.process.stdout.read()   # one JSON document at the end, if any
        self._reader.join(10)
        try:
            result = json.loads(stdout) if stdout.strip() else None
        except json.JSONDecodeError:
            result = None
        return self.process.returncode, result, "\n".join(self.lines)


def training(env, machine, tmp_path: Path, name: str, *, epochs: int, max_failures: int,
             after: int, **overrides) -> Run:
    """`up` a cluster on the hosts and start `run` of an MLP on it; return once `after` epochs
    have been shown (0: once the job's own first line has), or the run ended."""
    assert up(env, machine, name, **overrides).returncode == 0
    # -v: off a terminal `run` shows only epochs; after=0 waits for the driver's own first line
    run = Run(env, experiment(tmp_path, machine.folder / f"{name}.yaml", f"{name}-run",
                              epochs=epochs, max_failures=max_failures), *(["-v"] if after == 0 else []))

    def far_enough() -> bool:
        if after == 0:   # the job's driver runs on the head and `run` shows what it prints
            return any(line.startswith("orchestrate: run ") for line in list(run.lines))
        return len(run.epochs()) >= after

    run.until(far_enough, timeout=FIRST_EPOCH_S,
              what=f"{after} epoch(s) shown" if after else "the job's first line shown")
    return run


@pytest.mark.timeout(LONG_TEST_S)
def test_a_worker_dies_then_another_is_cut_off_then_down_with_one_dead(machine, env, tmp_path):
    """Faults 1, 2 and 5 of the issue on one cluster, one after the other, as they could come
    in a day: a worker host dies mid-training (the run goes on from its last checkpoint); then,
    on what is left, a run that allows no failure loses a worker cut off the network (the run
    fails naming it); then `down` while the first host is still dead."""
    name = f"die-{machine.name}"
    run = training(env, machine, tmp_path, name, epochs=5, max_failures=2, after=1)
    lost = machine.hosts[2]
    lost.kill()
    code, result, stderr = run.wait(RUN_END_S)
    assert code == 0, run.story()
    assert result["status"] == "SUCCEEDED" and result["metrics"]["epoch"] == 5
    # The kill landed mid-run, not after it: Train's failure policy retried (its controller's
    # line, in the job's whole log, which `run` names).
    [log] = re.findall(r"the job's whole log: (\S+\.log)", stderr)
    assert "[FailurePolicy] RETRY" in Path(log).read_text(errors="replace"), log
    # Training went on from the last checkpoint: no epoch was counted from 1 again, and every
    # epoch was shown (the one the kill interrupted may show twice).
    epochs = run.epochs()
    assert epochs[0] == 1 and 1 not in epochs[1:], epochs
    assert sorted(set(epochs)) == list(range(1, 6)), epochs
    history = [row["epoch"] for row in json.loads(Path(result["history"]).read_text())]
    assert history == epochs, (history, epochs)
    live = status_of(env, name)["live"]
    assert live["nodes_dead"] >= 1 and lost.ip not in live["node_ips"], live

    # The head and one worker are left; the three torch workers spread over both. That worker's
    # network is cut mid-training, in a run with max_failures 0.
    run = Run(env, experiment(tmp_path, machine.folder / f"{name}.yaml", f"{name}-cut",
                              epochs=1000, max_failures=0))   # it cannot end before the cut
    run.until(run.epochs, timeout=FIRST_EPOCH_S, what="an epoch shown")
    cut = machine.hosts[1]
    cut.cut()
    try:
        code, result, stderr = run.wait(RUN_END_S)
    finally:
        cut.restore()
    assert code == 1 and result is None, run.story()
    # Ray's own account of the failure names the node that was lost, and `run` shows it.
    assert "its node has died" in stderr and cut.ip in stderr, run.story()
    assert "orchestrate logs" in stderr   # where the whole log is

    # `down` while the first host is still dead: it finishes (600 s is a safety net for a hang,
    # not a time asserted), says which host it could not reach, and leaves no Ray on the others.
    done = orchestrate(env, "down", name, "-y", timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"could not stop Ray on worker {lost.ip}" in done.stderr, done.stderr
    assert status_of(env, name) == {}
    assert until(lambda: not (machine.hosts[0].pids() or machine.hosts[1].pids()), timeout=60), \
        machine.ray_processes()


def head_and_one_worker(machine, name: str) -> dict:
    """Overrides of the cluster file for the first two hosts only: a test whose faults need no
    second worker starts one Ray node fewer at each `up` (about 10 CPU-s on these hosts)."""
    provider = {**machine.cluster_config(name)["provider"], "worker_ips": [machine.hosts[1].ip]}
    return {"provider": provider, "min_workers": 1, "max_workers": 1}


@pytest.mark.timeout(LONG_TEST_S)
def test_the_head_dies_while_run_follows(machine, env, tmp_path):
    name = f"head-{machine.name}"
    run = training(env, machine, tmp_path, name, epochs=200, max_failures=0, after=0,
                   **head_and_one_worker(machine, name))
    head = machine.hosts[0]
    head.kill()
    # `run` gives up on its own after 30 s of silence from the head and says so; the 300 s here
    # is a safety net for a hang (then killed: no such message), not a time asserted.
    code, _, stderr = run.wait(300)
    assert code not in (0, None), (code, stderr)
    assert "has not answered" in stderr and "unreachable" in stderr, (code, stderr)
    status = status_of(env, name)
    assert status["live"]["reachable"] is False
    # `down` still stops Ray on the surviving hosts, in bounded time, and says what it could not.
    done = orchestrate(env, "down", name, "-y", timeout=600)
    assert done.returncode == 0, done.stderr
    # its logs could not be archived first (issue 32): said, and `down` went on
    assert "warning: the logs were not archived" in done.stderr, done.stderr
    assert until(lambda: not machine.hosts[1].pids(), timeout=60)
    # With the head back, `up` brings the cluster back; fault 7 is tried on the way.
    head.start()
    two_ups_then_ups_killed_while_they_write_state(env, machine, name, nodes=2)


def test_a_worker_unreachable_during_up(machine, env):
    name = f"unr-{machine.name}"
    off = machine.hosts[2]
    off.cut()
    done = up(env, machine, name, "--wait-timeout", "10")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "partial" in done.stderr and off.ip in done.stderr, done.stderr
    record = status_of(env, name)
    assert "partial" in (record.get("message") or "") and off.ip in record["message"], record
    down = orchestrate(env, "down", name, "-y", timeout=600)
    assert down.returncode == 0, down.stderr
    assert until(lambda: not any(h.pids() for h in machine.hosts[:2]), timeout=60)


def two_ups_then_ups_killed_while_they_write_state(env, machine, name: str, nodes: int) -> None:
    """Two `up`s of one file at once: one brings the cluster up, the other fails naming the
    holder of the lock. Then `up`s SIGKILLed at different moments leave the state readable and
    true, and do not block the next `up`."""
    path = machine.folder / f"{name}.yaml"
    command = [sys.executable, "-m", "orchestrator", "up", str(path), "-y", "--skip-preflight",
               "--format", "json"]
    first, second = (subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for _ in range(2))
    outcomes = [p.communicate(timeout=600) + (p.returncode,) for p in (first, second)]
    codes = sorted(code for _, _, code in outcomes)
    assert codes == [0, 1], outcomes
    (_, refused, _), = [o for o in outcomes if o[2] == 1]
    assert "busy" in refused and "pid" in refused and "Traceback" not in refused, refused
    (brought, _, _), = [o for o in outcomes if o[2] == 0]
    assert json.loads(brought)["health"]["nodes_alive"] == nodes
    assert status_of(env, name)["state"] == "up"
    # SIGKILL at different moments of an `up` (a changed file: it re-renders, writes the
    # record, runs `ray up`): whatever the moment, the state stays readable and true.
    for delay in (0.5, 2.0, 5.0):
        config = yaml.safe_load(path.read_text())
        config["idle_timeout_minutes"] = int(delay * 10) + 1
        path.write_text(yaml.safe_dump(config))
        process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        record = status_of(env, name)
        assert record["state"] in ("up", "launching", "interrupted"), record
    # The lock a killed `up` held is not left to block the next one.
    final = orchestrate(env, *command[3:], timeout=600)
    assert final.returncode == 0, final.stderr
    assert status_of(env, name)["state"] == "up"
    assert orchestrate(env, "down", name, "-y").returncode == 0
