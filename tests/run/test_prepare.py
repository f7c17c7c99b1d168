"""What `orchestrate run` ships before any Ray starts: the working_dir's excludes in the job's
runtime_env, the size it reports, the warning for a large upload, and the refusal (file, line,
field, exit code 1, nothing started) of one larger than Ray accepts."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.errors import SpecError
from orchestrator.language.experiment import load_experiment
from orchestrator.run.experiment import RunOptions, prepare
from orchestrator.util import workdir

REPO = Path(__file__).resolve().parents[2]


def experiment(folder: Path, **extra) -> Path:
    """The quickstart in `folder`, with its data, a .git folder, results from earlier runs
    inside the folder, and `extra` keys."""
    document = yaml.safe_load((REPO / "experiments" / "quickstart.yaml").read_text())
    document["run_config"]["storage_path"] = "results"
    document.update(extra)
    (folder / "data").mkdir(parents=True)
    for split in ("train", "valid"):
        name = f"breast_cancer_{split}.csv"
        (folder / "data" / name).write_bytes((REPO / "experiments" / "data" / name).read_bytes())
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "results" / "quickstart").mkdir(parents=True)
    (folder / "results" / "quickstart" / "big.bin").write_bytes(b"\0" * 100_000)
    (folder / "notes").mkdir()
    (folder / "notes" / "draft.md").write_text("draft\n")
    path = folder / "quickstart.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_the_job_leaves_out_git_results_and_the_users_excludes(tmp_path):
    path = experiment(tmp_path / "exp", runtime_env={"excludes": ["notes/"]})
    said: list[str] = []
    plan = prepare(load_experiment(path), RunOptions(), said.append)
    excludes = plan.runtime_env["excludes"]
    assert ".git" in excludes and "notes/" in excludes and "/results/" in excludes
    shipped = workdir.scan(tmp_path / "exp", tuple(excludes))
    assert [name for name, _ in shipped.files] == [
        "data/breast_cancer_train.csv", "data/breast_cancer_valid.csv", "quickstart.yaml"]
    assert said == [f"shipping {tmp_path / 'exp'} as the job's working_dir: 3 files, "
                    f"{shipped.size / 1024:.1f} KiB"]


def test_new_results_do_not_change_the_submission_id(tmp_path):
    path = experiment(tmp_path / "exp")
    first = prepare(load_experiment(path), RunOptions(), print).submission_id
    (tmp_path / "exp" / "results" / "quickstart-2").mkdir()
    (tmp_path / "exp" / "results" / "quickstart-2" / "metrics.json").write_text("[]")
    assert prepare(load_experiment(path), RunOptions(), print).submission_id == first
    data = tmp_path / "exp" / "data" / "breast_cancer_train.csv"
    data.write_text(data.read_text().splitlines()[0] + "\n")   # the same columns, no rows
    assert prepare(load_experiment(path), RunOptions(), print).submission_id != first


@pytest.mark.parametrize("store", ["mlruns", "file:{folder}/mlruns", "file:mlruns",
                                   "sqlite:///runs/mlflow.db", "sqlite:///{folder}/runs/mlflow.db?timeout=5"])
def test_a_local_tracking_store_is_not_shipped_and_what_it_records_changes_no_id(tmp_path,
                                                                                 store):
    """MLflow's file store (or SQLite file) beside the experiment is where the job writes,
    not code: shipped, it grew every upload, and each run's records made the next `run` of an
    unchanged experiment a new job (found by the Python API's test, 2026-12-03)."""
    folder = tmp_path / "exp"
    uri = store.format(folder=folder)
    path = experiment(folder, tracking={"mlflow": {"tracking_uri": uri}})
    first = prepare(load_experiment(path), RunOptions(), print)
    written = folder / ("runs/mlflow.db" if "sqlite" in uri else "mlruns/0/meta.yaml")
    written.parent.mkdir(parents=True)
    written.write_text("what a run recorded\n")
    if "sqlite" in uri:   # SQLite's journal beside its file
        (folder / "runs" / "mlflow.db-journal").write_text("a transaction\n")
    again = prepare(load_experiment(path), RunOptions(), print)
    assert again.submission_id == first.submission_id
    shipped = workdir.scan(folder, tuple(again.runtime_env["excludes"]))
    assert not [name for name, _ in shipped.files if "mlruns" in name or "mlflow.db" in name]


def test_a_tracking_server_is_not_mistaken_for_a_folder_to_leave_out(tmp_path):
    from orchestrator.render.experiment import _tracking_store

    for uri in ("http://127.0.0.1:5000", "https://mlflow.example", "databricks", "s3://b/p",
                "postgresql://db/mlflow"):
        path = experiment(tmp_path / uri.split(":")[0], tracking={"mlflow": {"tracking_uri": uri}})
        assert _tracking_store(load_experiment(path)) == (None, None), uri


def test_a_large_upload_is_announced_with_its_largest_entries(tmp_path, monkeypatch):
    path = experiment(tmp_path / "exp")
    monkeypatch.setattr(workdir, "WARN_BYTES", 1000)
    said: list[str] = []
    prepare(load_experiment(path), RunOptions(), said.append)
    assert said[1].startswith("  warning: that is a lot to upload with every job")
    assert "largest: data/" in said[1] and "runtime_env.excludes" in said[1]


def test_more_than_ray_accepts_is_refused_before_anything_starts(tmp_path, monkeypatch, capsys):
    path = experiment(tmp_path / "exp", working_dir=".")
    monkeypatch.setenv("RAY_max_grpc_message_size", "5000")
    with pytest.raises(SpecError) as caught:
        prepare(load_experiment(path), RunOptions(), print)
    (problem,) = caught.value.problems
    assert problem.field == "working_dir" and problem.file == str(path)
    assert problem.line == yaml.safe_dump(yaml.safe_load(path.read_text()), sort_keys=False) \
        .splitlines().index("working_dir: .") + 1
    assert "more than Ray accepts" in problem.message and "largest: data/" in (problem.hint or "")

    code = main(["run", str(path)])
    err = capsys.readouterr().err
    assert code == 1, err  # a problem the user can fix (docs/commands.md: exit codes)
    assert f"{path}:{problem.line}: working_dir: " in err
    assert "embedded Ray" not in err and "Traceback" not in err  # refused before any Ray started


def test_an_orchestrate_home_inside_the_working_dir_is_not_shipped(tmp_path, monkeypatch):
    """ORCHESTRATE_HOME holds the tokens of every cluster and service: one that lies inside an
    experiment's folder (`ORCHESTRATE_HOME=.orchestrate` in a project) never goes to a cluster."""
    path = experiment(tmp_path / "exp")
    home = tmp_path / "exp" / "state" / "home"
    monkeypatch.setenv("ORCHESTRATE_HOME", str(home))
    from orchestrator.state import State

    State.here().secrets.ensure("clusters/c1")
    assert list(home.rglob("c1"))
    plan = prepare(load_experiment(path), RunOptions(), print)
    assert "/state/home/" in plan.runtime_env["excludes"]
    shipped = workdir.scan(tmp_path / "exp", tuple(plan.runtime_env["excludes"]))
    names = [name for name, _ in shipped.files]
    assert "quickstart.yaml" in names and not [n for n in names if n.startswith("state/")]
