"""The project planner as a pure function over a table of cases: real project files (loaded,
rendered and hashed by `gitops.desired`), a state document built in the test, and what a refresh
"found" given as data. No SSH, no Ray, no backend."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from orchestrator.cluster.health import Health
from orchestrator.errors import SpecError
from orchestrator.gitops.desired import read_desired
from orchestrator.gitops.live import ClusterLive, Live
from orchestrator.gitops.planner import plan_project
from orchestrator.language.project import load_project
from orchestrator.state.document import StateDoc

HEALTHY = Health(nodes_alive=3, nodes_dead=0, session="s1")


def cluster(name: str, key: Path, **overrides) -> dict:
    config = {"cluster_name": name,
              "provider": {"type": "local", "head_ip": "10.0.0.1",
                           "worker_ips": ["10.0.0.2", "10.0.0.3"]},
              "auth": {"ssh_user": "ray", "ssh_private_key": f"../{key.name}"},
              "min_workers": 2, "max_workers": 2,
              "setup_commands": ["echo setup"],
              # three nodes: the experiments on it keep their runs where every node reaches
              "storage": "s3://p-results/runs"}
    config.update(overrides)
    return config


def experiment(name: str, cluster_file: str | None, epochs: int = 1) -> dict:
    document = {"name": name, "trainer": "torch",
                "model": {"name": "mlp", "hidden_dims": [8], "num_classes": 2},
                "datasets": {"train": {"format": "csv", "path": "data/train.csv"}},
                "label_column": "target",
                "train_loop_config": {"lr": 0.01, "epochs": epochs, "batch_size_per_worker": 8},
                "scaling_config": {"num_workers": 1}}
    if cluster_file:
        document["cluster"] = cluster_file
    return document


class Project:
    """A project folder: orchestrate.yaml, clusters/, experiments/ (with a tiny dataset)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "clusters").mkdir(parents=True)
        (root / "experiments" / "data").mkdir(parents=True)
        (root / "experiments" / "data" / "train.csv").write_text("a,target\n1,0\n2,1\n")
        self.key = root / "id_test"
        self.key.write_text("not a real key\n")
        (root / "orchestrate.yaml").write_text(yaml.safe_dump(
            {"project": "p", "include": ["clusters/*.yaml", "experiments/*.yaml"]}))

    def write(self, folder: str, name: str, document: dict) -> Path:
        path = self.root / folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    def desired(self, paths: list[Path] | None = None):
        project = load_project(self.root / "orchestrate.yaml")
        files = paths if paths is not None else project.files()
        return read_desired(project, files, lambda name: Path("/secrets") / name)


def applied(project: Project) -> StateDoc:
    """The state after an apply of everything the project holds now (clusters up)."""
    doc = StateDoc("p")
    for item in project.desired():
        if item.kind == "cluster":
            doc.resources[item.address] = {
                "kind": "cluster", "name": item.name, "file": item.file, "provider": "local",
                "hash": item.hash, "config": item.config,
                "record": {"state": "up", "head_ip": "10.0.0.1", "dashboard_port": 8265,
                           "dashboard_host": "0.0.0.0"}}
        else:
            doc.resources[item.address] = {
                "kind": "experiment", "name": item.name, "file": item.file, "hash": item.hash,
                "cluster": item.cluster, "job_id": f"job-{item.name}", "status": "SUCCEEDED"}
    return doc


def live(jobs: dict[str, str] | None = None, health: Health | None = HEALTHY,
         error: str | None = None) -> Live:
    return Live(True, {"gpu": ClusterLive(health, error, jobs or {})}, None)


@pytest.fixture
def project(tmp_path) -> Project:
    project = Project(tmp_path / "repo")
    project.write("clusters", "gpu", cluster("gpu", project.key))
    project.write("experiments", "mnist", experiment("mnist", "../clusters/gpu.yaml"))
    return project


def actions(plan) -> list[tuple[str, str]]:
    return [(c.address, c.action) for c in plan.changes]


def test_an_empty_state_creates_the_cluster_before_submitting_its_experiment(project):
    plan = plan_project(project.desired(), StateDoc("p"), Live(True))
    assert actions(plan) == [("cluster/gpu", "create"), ("experiment/mnist", "submit")]
    assert plan.summary() == {"create": 2, "update": 0, "delete": 0, "unchanged": 0}
    assert not plan.destructive and not plan.drift


def test_what_was_applied_plans_no_changes(project):
    plan = plan_project(project.desired(), applied(project), live())
    assert actions(plan) == [("cluster/gpu", "no-op"), ("experiment/mnist", "no-op")]
    assert not plan.actions and plan.summary()["unchanged"] == 2


@pytest.mark.parametrize("overrides, action, destructive, field", [
    ({"max_workers": 1, "min_workers": 1}, "update", False, "~ max_workers"),
    ({"setup_commands": ["echo changed"]}, "restart", True, "~ setup_commands"),
    ({"autostop": {"idle_minutes": 30}}, "update", False,
     "+ metadata.orchestrate.autostop.idle_minutes"),
    ({"provider": {"type": "local", "head_ip": "10.0.0.9",
                   "worker_ips": ["10.0.0.2", "10.0.0.3"]}}, "replace", True,
     "~ provider.head_ip"),
])
def test_a_changed_cluster_file(project, overrides, action, destructive, field):
    doc = applied(project)
    project.write("clusters", "gpu", cluster("gpu", project.key, **overrides))
    plan = plan_project(project.desired(), doc, live({"job-a": "RUNNING", "job-b": "SUCCEEDED"}))
    [change] = plan.actions
    assert (change.address, change.action, change.destructive) == ("cluster/gpu", action,
                                                                   destructive)
    assert field in change.fields
    # Only a destructive change interrupts jobs, and only the running ones.
    assert change.interrupts == (("job-a",) if destructive else ())
    assert change.before != change.after


def test_a_removed_cluster_file_deletes_it_after_stopping_its_running_experiment(project):
    doc = applied(project)
    doc.resources["experiment/mnist"]["status"] = "RUNNING"
    (project.root / "clusters" / "gpu.yaml").unlink()
    (project.root / "experiments" / "mnist.yaml").unlink()
    plan = plan_project(project.desired(), doc, live({"job-mnist": "RUNNING"}))
    assert actions(plan) == [("experiment/mnist", "stop"), ("cluster/gpu", "delete")]
    stop, delete = plan.changes
    assert stop.destructive and stop.interrupts == ("job-mnist",)
    assert delete.destructive and delete.interrupts == ("job-mnist",)
    assert plan.summary()["delete"] == 2


def test_an_experiment_whose_job_ended_is_forgotten_not_stopped(project):
    doc = applied(project)
    (project.root / "experiments" / "mnist.yaml").unlink()
    plan = plan_project(project.desired(), doc, live({"job-mnist": "SUCCEEDED"}))
    assert actions(plan) == [("experiment/mnist", "forget"), ("cluster/gpu", "no-op")]
    assert not plan.destructive


def test_a_partial_plan_never_deletes(project):
    doc = applied(project)
    other = project.write("experiments", "other", experiment("other", "../clusters/gpu.yaml"))
    (project.root / "experiments" / "mnist.yaml").unlink()
    plan = plan_project(project.desired([other]), doc, live(), partial=True)
    assert actions(plan) == [("experiment/other", "submit")]
    assert plan.partial


def test_a_changed_experiment_is_resubmitted_stopping_its_running_job(project):
    doc = applied(project)
    project.write("experiments", "mnist", experiment("mnist", "../clusters/gpu.yaml", epochs=3))
    plan = plan_project(project.desired(), doc, live({"job-mnist": "RUNNING"}))
    [change] = plan.actions
    assert (change.action, change.destructive, change.interrupts) == \
        ("resubmit", True, ("job-mnist",))
    ended = plan_project(project.desired(), doc, live({"job-mnist": "FAILED"}))
    assert [(c.action, c.destructive) for c in ended.actions] == [("resubmit", False)]


def test_a_dead_cluster_is_drift_and_restarts(project):
    doc = applied(project)
    plan = plan_project(project.desired(), doc, live(health=None, error="connection refused"))
    assert ("cluster/gpu", "restart") in actions(plan)
    assert [d.address for d in plan.drift] == ["cluster/gpu"]
    assert "connection refused" in plan.drift[0].message
    # Without a refresh nothing is asked, so nothing is known to be wrong.
    quiet = plan_project(project.desired(), doc, Live(False))
    assert not quiet.actions and not quiet.drift and not quiet.refreshed


def test_a_cluster_this_machine_cannot_ask_is_drift_and_unchanged(project):
    doc = applied(project)
    cannot = Live(True, {"gpu": ClusterLive(None, "no token at env://T_GPU", asked=False)})
    plan = plan_project(project.desired(), doc, cannot)
    assert not plan.actions
    assert [(d.address, d.message) for d in plan.drift] == \
        [("cluster/gpu", "not checked: no token at env://T_GPU")]


def test_a_job_gone_from_its_ray_is_drift_not_a_change(project):
    plan = plan_project(project.desired(), applied(project), live({}))
    assert not plan.actions
    assert [(d.address, "no longer in" in d.message) for d in plan.drift] == \
        [("experiment/mnist", True)]


def test_fewer_nodes_than_expected_is_drift(project):
    plan = plan_project(project.desired(), applied(project),
                        live(health=Health(nodes_alive=2, nodes_dead=1, session="s")))
    assert not plan.actions
    assert plan.drift[0].message == "2 of 3 nodes alive"


def test_an_experiment_on_an_unknown_cluster_is_an_error(project):
    project.write("experiments", "lost", experiment("lost", "../elsewhere/c.yaml"))
    (project.root / "elsewhere").mkdir()
    project.write("elsewhere", "c", cluster("elsewhere", project.key))
    with pytest.raises(SpecError) as caught:
        plan_project(project.desired(), StateDoc("p"), Live(True))
    assert "experiments/lost.yaml" in caught.value.problems[0].file
    assert "'elsewhere'" in caught.value.message


def test_two_files_with_one_name_are_an_error(project):
    project.write("clusters", "copy", cluster("gpu", project.key))
    with pytest.raises(SpecError, match="also defined in clusters/"):
        project.desired()


def test_hashes_do_not_depend_on_where_the_project_is_checked_out(project, tmp_path):
    first = {d.address: d.hash for d in project.desired()}
    moved = tmp_path / "elsewhere" / "repo"
    shutil.copytree(project.root, moved)
    project.root = moved
    assert {d.address: d.hash for d in project.desired()} == first


def test_hashes_do_not_depend_on_where_orchestrate_is_installed(project, monkeypatch):
    """The head package's file mount names this machine's installation of orchestrate."""
    from orchestrator.gitops import desired
    from orchestrator.render import cluster as render

    first = {d.address: (d.hash, d.config) for d in project.desired() if d.kind == "cluster"}
    [(_, config)] = first.values()
    assert config["file_mounts"]["~/.orchestrate/head"] == "${ORCHESTRATE}/head"
    for module in (desired, render):
        monkeypatch.setattr(module, "HEAD_SOURCE", "/opt/elsewhere/orchestrator/head")
    monkeypatch.setattr(render.with_watcher, "__defaults__", ("/opt/elsewhere/orchestrator/head",))
    again = {d.address: (d.hash, d.config) for d in project.desired() if d.kind == "cluster"}
    assert again == first
    [item] = [d for d in project.desired() if d.kind == "cluster"]
    assert item.rendered is not None
    assert item.rendered.config["file_mounts"]["~/.orchestrate/head"] == \
        "/opt/elsewhere/orchestrator/head"


def test_only_the_changed_experiment_is_resubmitted_but_code_changes_count(project):
    """Experiments share a folder (their working_dir): removing or editing one file must not
    resubmit the others; a change to the code they ship does."""
    project.write("experiments", "other", experiment("other", "../clusters/gpu.yaml"))
    doc = applied(project)
    project.write("experiments", "other", experiment("other", "../clusters/gpu.yaml", epochs=5))
    plan = plan_project(project.desired(), doc, live())
    assert [(c.address, c.action) for c in plan.actions] == [("experiment/other", "resubmit")]
    (project.root / "experiments" / "other.yaml").unlink()
    plan = plan_project(project.desired(), doc, live())
    assert [(c.address, c.action) for c in plan.actions] == [("experiment/other", "forget")]
    (project.root / "experiments" / "helpers.py").write_text("SCALE = 2\n")
    plan = plan_project(project.desired(), doc, live())
    assert ("experiment/mnist", "resubmit") in [(c.address, c.action) for c in plan.actions]


def test_hashes_do_not_depend_on_the_home_folder(project, monkeypatch, tmp_path):
    """`~/results` is expanded when the job config is resolved; two people (or a person and a
    CI runner) must still hash the same experiment the same."""
    document = experiment("mnist", "../clusters/gpu.yaml")
    document["run_config"] = {"storage_path": "~/results"}
    project.write("experiments", "mnist", document)
    hashes = []
    for name in ("alice", "runner"):
        monkeypatch.setenv("HOME", str(tmp_path / name))
        hashes.append({d.address: d.hash for d in project.desired()})
    assert hashes[0] == hashes[1]
