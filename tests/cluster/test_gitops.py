"""GitOps end to end, with no mock of our own code: a project (a `local`-provider cluster on
SSH hosts made by the test, two experiments on the embedded local Ray), its state in S3 and its
token in Secrets Manager, both on moto's server on loopback (the only fake: AWS's API, faked at
the wire), and two "runners": two ORCHESTRATE_HOME folders sharing nothing but that state.
"""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import boto3
import jsonschema
import pytest
import yaml

from orchestrator.util.waiting import until

from ..moto_server import make_bucket, moto_server  # noqa: F401 - a fixture
from ..processes import stop
from .conftest import orchestrate

pytestmark = [pytest.mark.ssh, pytest.mark.ray]

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "experiments" / "data"
BUCKET, PREFIX = "orc-state", "team/ml"


def experiment(name: str) -> dict:
    return {"name": name, "trainer": "torch",
            "model": {"name": "mlp", "hidden_dims": [8], "num_classes": 2},
            "datasets": {"train": {"format": "csv", "path": "data/train.csv"}},
            "label_column": "target",
            "train_loop_config": {"lr": 0.01, "epochs": 1, "batch_size_per_worker": 64},
            "scaling_config": {"num_workers": 1},
            "run_config": {"storage_path": "../results"}}


class Runner:
    """One CI runner: its own ORCHESTRATE_HOME, the shared S3 state, the project checkout."""

    def __init__(self, name: str, home: Path, root: Path, aws: dict, seen: list[str]) -> None:
        self.name, self.home, self.root, self.seen = name, home, root, seen
        self.started: list[subprocess.Popen] = []  # stopped by the test, whatever happens
        self.env = {**__import__("os").environ, **aws, "ORCHESTRATE_HOME": str(home),
                    "RAY_USAGE_STATS_ENABLED": "0"}

    def __call__(self, *args: str, ok: bool | None = True, timeout: float = 900):
        done = orchestrate(self.env, *args, timeout=timeout, cwd=self.root)
        self.seen += [done.stdout, done.stderr]
        if ok is True:
            assert done.returncode == 0, f"{self.name}: {args}\n{done.stdout}\n{done.stderr}"
        return done

    def plan(self, *args: str) -> dict:
        return json.loads(self("plan", "--format", "json", *args).stdout)

    def popen(self, *args: str) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-m", "orchestrator", *args], env=self.env,
                                   cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, text=True)
        self.started.append(process)
        return process


def actions(plan: dict) -> dict[str, str]:
    return {c["address"]: c["action"] for c in plan["changes"]}


def state(s3) -> dict:
    return json.loads(s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/state.json")["Body"].read())


def lock_exists(s3) -> bool:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/state.lock")
    return bool(listed.get("KeyCount"))


def edit(path: Path, **changes) -> None:
    document = yaml.safe_load(path.read_text())
    document.update(changes)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def test_two_runners_share_one_project(make_machine, moto_server, tmp_path, monkeypatch):  # noqa: F811
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    make_bucket(moto_server, BUCKET)
    s3 = boto3.client("s3")
    machine = make_machine(count=2)   # a head and a worker: the project's life is what is tested
    root = tmp_path / "repo"
    (root / "clusters").mkdir(parents=True)
    (root / "experiments" / "data").mkdir(parents=True)
    shutil.copy(DATA / "breast_cancer_train.csv", root / "experiments" / "data" / "train.csv")
    (root / "orchestrate.yaml").write_text(yaml.safe_dump({
        "project": "ml", "include": ["clusters/*.yaml", "experiments/*.yaml"],
        "state": f"s3://{BUCKET}/{PREFIX}", "secrets": "aws-sm://orc/ml/"}))
    name = f"g-{machine.name}"
    cluster = root / "clusters" / "c.yaml"
    shutil.copy(machine.cluster_file(name), cluster)
    seen: list[str] = []
    a = Runner("A", tmp_path / "home-a", root, moto_server.env, seen)
    b = Runner("B", tmp_path / "home-b", root, moto_server.env, seen)
    try:
        # A cluster started by the single-file command is managed by the project from then on.
        a("up", str(cluster), "-y")
        for exp in ("first", "second"):
            (root / "experiments" / f"{exp}.yaml").write_text(yaml.safe_dump(experiment(exp)))
        plan = a.plan()
        jsonschema.validate(plan, json.loads((REPO / "schemas" / "plan.schema.json").read_text()))
        assert actions(plan) == {f"cluster/{name}": "no-op", "experiment/first": "submit",
                                 "experiment/second": "submit"}
        assert plan["summary"] == {"create": 2, "update": 0, "delete": 0, "unchanged": 1}

        # A applies; the jobs run on A's local Ray and are followed to their end.
        applied = json.loads(a("apply", "-y", "--wait", "--format", "json").stdout)
        assert applied["results"] == {"first": "SUCCEEDED", "second": "SUCCEEDED"}
        recorded = state(s3)
        assert sorted(recorded["resources"]) == [f"cluster/{name}", "experiment/first",
                                                 "experiment/second"]
        token = boto3.client("secretsmanager").get_secret_value(
            SecretId=f"orc/ml/clusters/{name}")["SecretString"]
        assert recorded["resources"][f"cluster/{name}"]["token"]["ref"] == \
            f"aws-sm://orc/ml/clusters/{name}"

        serial = state(s3)["serial"]
        a("up", str(cluster), "-y")  # a no-op: the state is not written again
        assert state(s3)["serial"] == serial

        # B plans with nothing of its own: no changes, and it starts nothing.
        gcs = machine.ray_pids("gcs_server")
        assert len(gcs) == 1, gcs   # the head's GCS: one, so the comparisons below mean something
        done = b("plan", "--detailed-exitcode")
        assert "No changes" in done.stdout
        assert not (b.home / "clusters").exists()                  # no cluster checked out,
        assert not (b.home / "local-ray" / "record.json").exists()  # no local Ray started
        assert machine.ray_pids("gcs_server") == gcs

        # A change of min_workers is an update, applied by B without restarting Ray.
        edit(cluster, min_workers=0)
        plan = b.plan()
        assert actions(plan)[f"cluster/{name}"] == "update"
        assert b("plan", "--detailed-exitcode", ok=None).returncode == 2
        serial = state(s3)["serial"]
        b("apply", "-y")
        assert machine.ray_pids("gcs_server") == gcs
        assert state(s3)["serial"] == serial + 1
        assert a("plan", "--detailed-exitcode").returncode == 0  # A sees B's apply

        # An experiment's file removed after its job ended: forget.
        (root / "experiments" / "second.yaml").unlink()
        assert actions(a.plan()) == {f"cluster/{name}": "no-op", "experiment/first": "no-op",
                                     "experiment/second": "forget"}  # first is not resubmitted
        a("apply", "-y")
        assert "experiment/second" not in state(s3)["resources"]

        # Two applies at once: one holds the lock, the other fails naming it; state intact.
        edit(cluster, idle_timeout_minutes=6)
        first, second = a.popen("apply", "-y"), b.popen("apply", "-y")
        outputs = [p.communicate(timeout=600) for p in (first, second)]
        seen += [text for pair in outputs for text in pair]
        codes = sorted(p.returncode for p in (first, second))
        assert codes == [0, 1], outputs
        loser = outputs[[first.returncode, second.returncode].index(1)][1]
        assert "lock" in loser and "apply by" in loser, loser
        assert not lock_exists(s3)
        assert b("plan", "--detailed-exitcode").returncode == 0

        # A saved plan applied after another apply is refused as stale.
        edit(cluster, idle_timeout_minutes=7)
        saved = tmp_path / "plan.json"
        a("plan", "--out", str(saved))
        b("apply", "-y")
        stale = a("apply", str(saved), "-y", ok=False)
        assert stale.returncode == 1 and "stale" in stale.stderr
        shown = a("show", str(saved), "--format", "markdown").stdout
        assert f"`cluster/{name}`" in shown and "**update**" in shown

        # SIGTERM during an apply: it stops, and leaves no lock behind.
        edit(cluster, idle_timeout_minutes=8)
        running = a.popen("apply", "-y")  # holds the lock for seconds (refresh, `ray up`)
        assert until(lambda: lock_exists(s3), timeout=60, interval=0.02)
        running.send_signal(signal.SIGTERM)
        out, err = running.communicate(timeout=120)
        seen += [out, err]
        assert running.returncode == 143, err
        assert not lock_exists(s3)
        state(s3)  # still a whole document

        # The cluster's file removed: delete, only with --allow-destructive; no Ray is left.
        cluster.unlink()
        plan = a.plan()
        assert actions(plan) == {"experiment/first": "no-op", f"cluster/{name}": "delete"}, \
            json.dumps(plan["changes"])
        refused = a("apply", "-y", ok=False)
        assert refused.returncode == 1 and "--allow-destructive" in refused.stderr
        assert f"cluster/{name}" in state(s3)["resources"]
        a("apply", "-y", "--allow-destructive")
        assert sorted(state(s3)["resources"]) == ["experiment/first"]
        assert until(lambda: not machine.ray_pids("ray|gcs_server|raylet"), timeout=60), \
            machine.ray_processes()

        # The token was never printed, logged, or written into state or plans.
        files = [saved, *a.home.rglob("*.log"), *b.home.rglob("*.log")]
        texts = seen + [p.read_text(errors="replace") for p in files if p.is_file()]
        texts.append(json.dumps(state(s3)))
        assert all(token not in text for text in texts)
    finally:
        for process in a.started + b.started:
            stop(process)
        orchestrate(a.env, "stop", "--local-ray", timeout=120)
        for runner in (a, b):
            if (runner.home / "clusters" / name / "record.json").exists():
                orchestrate(runner.env, "down", name, "-y", timeout=300)
