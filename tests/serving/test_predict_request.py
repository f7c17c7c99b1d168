"""What `orchestrate predict` decides before any Ray starts: the source it names, the data as
the job will read it, the submission id, and the refusals (exit 1 or 2, nothing started)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import contract
from orchestrator.cli import main
from orchestrator.reach import embedded
from orchestrator.render.predict import Settings
from orchestrator.serving.predict import PredictOptions, plan, resolve
from orchestrator.state import State

from ..run.test_prepare import experiment


def no_local_ray() -> bool:
    return embedded.current(State.here().secrets) is None


def test_an_experiment_never_run_here_is_refused(tmp_path, capsys):
    path = experiment(tmp_path / "exp")
    code = main(["predict", str(path), "--data", str(tmp_path / "exp" / "data"),
                 "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1
    assert f"no finished run of {path} is recorded on this machine" in err
    assert "orchestrate run" in err  # the hint says what to do
    assert no_local_ray()


def test_a_missing_source_or_data_names_the_argument(tmp_path, capsys):
    code = main(["predict", str(tmp_path / "nowhere"), "--data", str(tmp_path),
                 "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and "SOURCE" in err and "nowhere does not exist" in err
    code = main(["predict", str(tmp_path), "--data", str(tmp_path / "no.csv"),
                 "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and "--data" in err and "no.csv does not exist" in err
    assert no_local_ray()


@pytest.mark.parametrize("args", [["--workers", "0"], ["--batch-size", "-3"], ["--gpus", "x"],
                                  ["--output-format", "xlsx"], ["--checkpoint", "first"]])
def test_bad_arguments_are_usage_errors(tmp_path, capsys, args):
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", str(tmp_path), "--data", str(tmp_path), "--output", "o", *args])
    assert exit_info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def recorded(path: Path, run: Path) -> None:
    """As `orchestrate run` records a finished run for `orchestrate results`."""
    State.here().store.record_run("quickstart", {"name": "quickstart", "status": "SUCCEEDED",
                                                 "run_path": str(run)}, "job-1")


def test_data_inside_the_experiment_ships_with_it(tmp_path, monkeypatch):
    path = experiment(tmp_path / "exp")
    recorded(path, tmp_path / "exp" / "results" / "quickstart")
    monkeypatch.chdir(tmp_path / "exp")
    options = PredictOptions(source=str(path), data="data/breast_cancer_valid.csv",
                             output="out", settings=Settings(evaluate=True))
    request, where = resolve(options, State.here())
    assert request.source == str(tmp_path / "exp" / "results" / "quickstart")  # its latest run
    assert request.data == {"format": "csv", "path": "data/breast_cancer_valid.csv"}
    assert request.output == str(tmp_path / "exp" / "out")
    job = plan(request, where)
    assert job.runtime_env["working_dir"] == str(tmp_path / "exp")
    assert "results" in " ".join(job.runtime_env["excludes"])  # the run's storage stays home
    config = json.loads(job.runtime_env["env_vars"][contract.CONFIG_ENV])
    assert config == job.config and config["workload"] == "predict" and config["evaluate"]
    assert config["source"]["checkpoint"] == "best"


def test_the_submission_id_follows_the_request(tmp_path):
    run = tmp_path / "results" / "quickstart"
    run.mkdir(parents=True)
    data = tmp_path / "rows.parquet"
    data.mkdir()
    state = State.here()

    def job_id(output: str = "o", **changes) -> str:
        options = PredictOptions(source=str(run), data=str(data), output=output,
                                 settings=Settings(**changes))
        request, where = resolve(options, state)
        assert where.working_dir is None and where.cluster is None
        job = plan(request, where)
        assert "working_dir" not in job.runtime_env  # nothing of this folder is uploaded
        return job.submission_id

    first = job_id()
    assert first.startswith("orchestrate-predict-quickstart-")
    assert job_id() == first
    assert job_id(output="p") != first
    assert job_id(checkpoint="latest") != first
    assert job_id(keep_columns=("a",)) != first


def test_a_checkpoint_is_named_after_its_run(tmp_path):
    checkpoint = tmp_path / "results" / "cancer" / "checkpoint_2026-11-24_06-00-24.847652"
    checkpoint.mkdir(parents=True)
    request, _ = resolve(PredictOptions(source=str(checkpoint), data=str(tmp_path), output="o"),
                         State.here())
    assert request.name == "cancer"
