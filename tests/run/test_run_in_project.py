"""`orchestrate run` of a project's experiment file records the experiment's entry in the
project's state as `apply` would, reading each file once: the job's target is faked (no Ray)."""
from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from orchestrator import language
from orchestrator.cli import main
from orchestrator.gitops.desired import desired_experiment
from orchestrator.gitops.store import ProjectState
from orchestrator.language import cluster as cluster_lang
from orchestrator.language import experiment as experiment_lang
from orchestrator.language import project as project_lang
from orchestrator.language.experiment import load_experiment
from orchestrator.language.project import load_project
from orchestrator.reach.endpoint import Endpoint
from orchestrator.render import experiment as render
from orchestrator.run import experiment as use_case
from orchestrator.state import State

from ..gitops.test_planner import Project, experiment


@pytest.fixture
def project(tmp_path, monkeypatch) -> Project:
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    project = Project(tmp_path / "repo")
    project.write("experiments", "mnist", experiment("mnist", None))
    return project


def test_the_entry_from_the_loaded_spec_is_what_plan_computes(project):
    path = project.root / "experiments" / "mnist.yaml"
    spec = load_experiment(path)
    [planned] = project.desired()
    assert desired_experiment(load_project(project.root / "orchestrate.yaml"), spec,
                              render.ship(spec)) == planned
    assert desired_experiment(load_project(project.root / "orchestrate.yaml"), spec) == planned


class FakeJobs:
    endpoint = Endpoint("http://127.0.0.1:1", None, "the embedded Ray")

    def submit(self, **_kwargs: object) -> bool:
        return True

    def nodes(self) -> None:   # a Ray that does not say what it has: not queued
        return None


def test_a_detached_run_reads_each_file_once_and_records_its_entry(project, monkeypatch, capsys):
    loaded: list[str] = []
    walked: list[str] = []
    for module in (language, cluster_lang, experiment_lang, project_lang):
        real_load = module.load_file

        def counted(path, *args, real=real_load, **kwargs):
            loaded.append(Path(path).name)
            return real(path, *args, **kwargs)
        monkeypatch.setattr(module, "load_file", counted)
    real_ship = render.ship

    def ship(spec):
        walked.append(spec.name)
        return real_ship(spec)
    monkeypatch.setattr(render, "ship", ship)
    monkeypatch.setattr(use_case, "ship", ship)
    # the fake Ray never says what it has: do not wait the 30 s a Ray just started may take
    monkeypatch.setattr(use_case, "CAPACITY_WAIT", 0.0)

    @contextlib.contextmanager
    def target(spec, state, *, keep, progress):
        assert keep
        yield FakeJobs(), None
    monkeypatch.setattr(use_case, "target", target)

    path = project.root / "experiments" / "mnist.yaml"
    assert main(["run", str(path), "--detach"]) == 0
    out, err = capsys.readouterr()
    job_id = out.strip()
    assert f"submitted job {job_id} to the embedded Ray" in err
    assert sorted(loaded) == ["mnist.yaml", "orchestrate.yaml"], loaded
    assert walked == ["mnist"]
    ps = ProjectState.open(load_project(project.root / "orchestrate.yaml"), State.here())
    entry = ps.read().resources["experiment/mnist"]
    [planned] = project.desired()
    assert (entry["job_id"], entry["hash"], entry["cluster"]) == (job_id, planned.hash, None)
