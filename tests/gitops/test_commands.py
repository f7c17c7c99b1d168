"""The GitOps commands as a user runs them (`python -m orchestrator ...` in a project folder),
on the file backend, without Ray or SSH: what they print, their exit codes, what they refuse, and
that the state is left whole. Clusters "applied" here are written into the state document
through the library (as test_planner.py does); nothing is launched."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from orchestrator.gitops.store import ProjectState
from orchestrator.language.project import load_project
from orchestrator.state import State

from ..moto_server import aws_env, moto_server  # noqa: F401 - fixtures
from .test_planner import Project, applied, cluster, experiment

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path, monkeypatch) -> Project:
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    project = Project(tmp_path / "repo")
    project.write("clusters", "gpu", cluster("gpu", project.key))
    project.write("experiments", "mnist", experiment("mnist", "../clusters/gpu.yaml"))
    return project


def cli(project: Project, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd or project.root,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}, timeout=120)


def record_applied(project: Project) -> ProjectState:
    """The state as if everything the project holds now had been applied."""
    ps = ProjectState.open(load_project(project.root / "orchestrate.yaml"), State.here())
    ps.read()
    ps.write(applied(project))
    return ps


def test_plan_of_a_new_project_in_every_format(project, tmp_path):
    text = cli(project, "plan", "--refresh=false")
    assert text.returncode == 0, text.stderr
    assert "+ cluster/gpu: create" in text.stdout and "+ experiment/mnist: submit" in text.stdout
    assert "Plan: 2 to create, 0 to update, 0 to delete, 0 unchanged." in text.stdout

    done = cli(project, "plan", "--refresh=false", "--format", "json")
    plan = json.loads(done.stdout)  # nothing but JSON on stdout
    jsonschema.validate(plan, json.loads((REPO / "schemas" / "plan.schema.json").read_text()))
    assert [(c["address"], c["action"]) for c in plan["changes"]] == \
        [("cluster/gpu", "create"), ("experiment/mnist", "submit")]
    assert plan["serial"] == 0 and plan["project"] == "p"

    markdown = cli(project, "plan", "--refresh=false", "--format", "markdown").stdout
    assert "|  | `cluster/gpu` | **create** | not launched yet |  |" in markdown

    assert cli(project, "plan", "--refresh=false", "--detailed-exitcode").returncode == 2
    # From a subfolder, the project is found above it.
    assert cli(project, "plan", "--refresh=false",
               cwd=project.root / "experiments").returncode == 0


def test_no_changes_exit_zero_with_detailed_exitcode(project):
    record_applied(project)
    done = cli(project, "plan", "--refresh=false", "--detailed-exitcode")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No changes. 2 unchanged." in done.stdout


def test_a_saved_plan_is_shown_and_refused_once_stale(project, tmp_path):
    record_applied(project)
    project.write("clusters", "gpu", cluster("gpu", project.key, max_workers=1, min_workers=1))
    saved = tmp_path / "plan.json"
    assert cli(project, "plan", "--refresh=false", "--out", str(saved)).returncode == 0
    assert saved.stat().st_mode & 0o777 == 0o600
    shown = cli(project, "show", str(saved))
    assert "~ cluster/gpu: update" in shown.stdout and "~ max_workers" in shown.stdout
    as_json = json.loads(cli(project, "show", str(saved), "--format", "json").stdout)
    assert as_json["changes"][0]["action"] == "update"
    # The state moves (someone forgets the experiment): the saved plan is stale.
    assert cli(project, "state", "rm", "experiment/mnist").returncode == 0
    stale = cli(project, "apply", str(saved), "-y")
    assert stale.returncode == 1
    assert "stale" in stale.stderr and "serial 1 -> 2" in stale.stderr
    # A file that is not a plan is said to be one.
    not_plan = tmp_path / "notes.txt"
    not_plan.write_text("hello")
    assert "not a plan file" in cli(project, "show", str(not_plan)).stderr


def test_apply_refuses_destructive_changes_and_asks_for_auto_approve(project):
    record_applied(project)
    (project.root / "clusters" / "gpu.yaml").unlink()
    (project.root / "experiments" / "mnist.yaml").unlink()
    before = cli(project, "state", "list", "--format", "json").stdout
    # No file left at all: more likely a wrong glob than a wish to delete everything.
    empty = cli(project, "plan", "--refresh=false")
    assert empty.returncode == 1
    assert "orchestrate.yaml:1: include: no file matches these globs" in empty.stderr
    assert "cluster/gpu, experiment/mnist" in empty.stderr

    project.write("experiments", "other", experiment("other", None))
    refused = cli(project, "apply", "-y")
    assert refused.returncode == 1
    assert "destructive" in refused.stderr and "cluster/gpu (delete" in refused.stderr
    assert "--allow-destructive" in refused.stderr
    assert cli(project, "state", "list", "--format", "json").stdout == before

    no_terminal = cli(project, "apply", "experiments/other.yaml")  # partial: no deletes
    assert no_terminal.returncode == 1
    assert "needs -y/--auto-approve" in no_terminal.stderr
    assert cli(project, "state", "list", "--format", "json").stdout == before


def test_state_list_show_rm(project):
    record_applied(project)
    listed = cli(project, "state", "list")
    assert "cluster/gpu" in listed.stdout and "experiment/mnist" in listed.stdout
    shown = json.loads(cli(project, "state", "show", "cluster/gpu").stdout)
    assert shown["record"]["state"] == "up" and shown["file"] == "clusters/gpu.yaml"
    missing = cli(project, "state", "show", "cluster/nope")
    assert missing.returncode == 1 and "known: cluster/gpu, experiment/mnist" in missing.stderr
    assert cli(project, "state", "rm", "cluster/gpu").returncode == 0
    after = json.loads(cli(project, "state", "list", "--format", "json").stdout)
    assert after["addresses"] == ["experiment/mnist"] and after["serial"] == 2


def test_a_held_lock_names_its_holder_and_force_unlock_needs_its_id(project):
    from orchestrator.state.backends import LockInfo

    ps = record_applied(project)
    info = LockInfo.new("apply")
    ps.backend.acquire(info)
    project.write("experiments", "other", experiment("other", None))
    busy = cli(project, "apply", "-y")
    assert busy.returncode == 1
    assert f"apply by {info.who}" in busy.stderr and info.id in busy.stderr
    wrong = cli(project, "force-unlock", "0123")
    assert wrong.returncode == 1 and info.id in wrong.stderr
    assert ps.backend.holder() == info
    assert cli(project, "force-unlock", info.id).returncode == 0
    assert ps.backend.holder() is None


def test_project_file_problems_name_the_file_and_line(project, tmp_path):
    (project.root / "orchestrate.yaml").write_text("project: p\ninclude: [a]\nsecret: env://X\n")
    done = cli(project, "plan")
    assert done.returncode == 1
    assert "orchestrate.yaml:3: secret: unknown key 'secret'" in done.stderr
    assert "did you mean 'secrets'" in done.stderr
    assert "Traceback" not in done.stderr
    elsewhere = tmp_path / "empty"
    elsewhere.mkdir()
    lost = cli(project, "plan", cwd=elsewhere)
    assert lost.returncode == 1 and "no orchestrate.yaml here or in any folder above" in lost.stderr


def test_a_runner_without_the_token_is_told_which_reference(project, monkeypatch):
    """env:// tokens: the state names the variable; a runner without it learns which."""
    document = yaml.safe_load((project.root / "orchestrate.yaml").read_text())
    document["secrets"] = "env://ORCHESTRATE_TOKEN_ORC_"
    (project.root / "orchestrate.yaml").write_text(yaml.safe_dump(document))
    ps = record_applied(project)
    doc = ps.read()
    doc.resources["cluster/gpu"]["token"] = {"ref": "env://ORCHESTRATE_TOKEN_ORC_GPU",
                                             "fingerprint": "sha256:0123456789abcdef"}
    ps.write(doc)
    monkeypatch.delenv("ORCHESTRATE_TOKEN_ORC_GPU", raising=False)
    done = cli(project, "plan")  # the refresh needs the token to reach the cluster
    assert done.returncode == 0, done.stderr
    # Drift: not checked, and why; not a restart of a cluster nobody could ask.
    assert "cluster/gpu: not checked" in done.stdout and \
        "env://ORCHESTRATE_TOKEN_ORC_GPU" in done.stdout
    assert "No changes" in done.stdout
    applying = cli(project, "apply", "-y", "--allow-destructive",
                   str(project.write("clusters", "gpu", cluster("gpu", project.key, max_workers=1,
                                                                 min_workers=1))))
    assert applying.returncode == 1
    assert "cannot read" in applying.stderr and \
        "env://ORCHESTRATE_TOKEN_ORC_GPU" in applying.stderr


def test_a_partial_plan_takes_only_the_projects_files(project, tmp_path):
    stray = tmp_path / "stray.yaml"
    stray.write_text(yaml.safe_dump(cluster("stray", project.key)))
    done = cli(project, "plan", "--refresh=false", str(stray))
    assert done.returncode == 1 and "not one of project p's files" in done.stderr
    (project.root / ".github").mkdir()
    (project.root / ".github" / "ci.yml").write_text("on: push\n")
    folder = cli(project, "plan", "--refresh=false", "--format", "json", ".")
    assert folder.returncode == 0, folder.stderr  # the folder's project files, not its others
    assert json.loads(folder.stdout)["partial"] is True


def test_a_damaged_plan_file_is_an_error_not_a_crash(project, tmp_path):
    saved = tmp_path / "plan.json"
    assert cli(project, "plan", "--refresh=false", "--out", str(saved)).returncode == 0
    document = json.loads(saved.read_text())
    del document["changes"]
    saved.write_text(json.dumps(document))
    for command in (("show", str(saved)), ("apply", str(saved), "-y")):
        done = cli(project, *command)
        assert done.returncode == 1, done.stderr
        assert "damaged plan file" in done.stderr and "'changes' is a required" in done.stderr


def test_a_cluster_started_before_the_project_keeps_its_token(project, aws_env):  # noqa: F811
    """aws-sm:// tokens (Secrets Manager on moto's server on loopback): the first apply of a
    cluster this machine already runs stores the token it runs with, not a new one."""
    from orchestrator.gitops.checkout import ensure_token
    from orchestrator.state import cluster_key

    document = yaml.safe_load((project.root / "orchestrate.yaml").read_text())
    document["secrets"] = "aws-sm://orc/p/"
    (project.root / "orchestrate.yaml").write_text(yaml.safe_dump(document))
    local = State.here()
    running = local.secrets.ensure(cluster_key("gpu")).read_text()
    ps = ProjectState.open(load_project(project.root / "orchestrate.yaml"), local)
    ensure_token("gpu", ps, None, local, create=True)
    assert ps.tokens.fetch(cluster_key("gpu")) == running
    assert local.secrets.read(cluster_key("gpu")) == running


def test_apply_checks_every_submission_before_its_first_change(project, monkeypatch):
    """A resubmit stops the earlier job first: an experiment that `run` would refuse (here a
    `from_env` variable the runner does not set) must stop apply before anything changes."""
    record_applied(project)
    monkeypatch.delenv("MNIST_TOKEN", raising=False)
    changed = experiment("mnist", "../clusters/gpu.yaml")
    changed["runtime_env"] = {"env_vars": {"TOKEN": {"from_env": "MNIST_TOKEN"}}}
    path = project.write("experiments", "mnist", changed)
    before = cli(project, "state", "list", "--format", "json").stdout
    plan = cli(project, "plan", "--refresh=false")
    assert "experiment/mnist: resubmit" in plan.stdout, plan.stdout + plan.stderr

    done = cli(project, "apply", "-y", "--allow-destructive")
    assert done.returncode == 1
    assert f"{path}:" in done.stderr and "runtime_env.env_vars.TOKEN.from_env: MNIST_TOKEN is " \
                                         "not set in this environment" in done.stderr
    assert "experiment/mnist: resubmit" not in done.stderr   # no change was begun
    assert cli(project, "state", "list", "--format", "json").stdout == before
