"""The Python API (`orchestrator.api`) as a notebook uses it, on the embedded Ray: `run` of the
session's XGBoost experiment and `results` of it and of the LightGBM run, typed answers and the
project's own errors, never a print of its own or an exit; the CLI's `results` prints what the
API returned (one code path, tested through both).

No training of its own: the experiment is unchanged since the session's run submitted it, so
`run` finds that job, follows it to its end (ended already) and reads its results, which is the
path every run after the first takes."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from .conftest import cli

pytestmark = [pytest.mark.ray]


@pytest.mark.xdist_group("trained-boosted")
def test_a_notebook_runs_an_experiment_and_compares_results(trained, tmp_path, monkeypatch,
                                                            capsys):
    import orchestrator.api as orc
    from orchestrator.errors import JobError, OrchestrateError, SpecError

    xgb, lgbm = trained.xgboost, trained.lightgbm
    xgb.use(monkeypatch)
    capsys.readouterr()

    said: list[str] = []
    epochs = io.StringIO()
    ran = orc.run(xgb.path, progress=said.append, out=epochs)
    assert (ran.job_id, ran.created, ran.cluster) == (xgb.summary["job_id"], False, None)
    assert ran.summary is not None and ran.summary["metrics"] == xgb.summary["metrics"]
    assert any("exists already" in line or "already exists" in line for line in said), said
    assert capsys.readouterr() == ("", ""), "the API printed by itself"

    # one run: its summary, by job id, run name or folder, as `results --format json` gives it
    for key in (ran.job_id, xgb.summary["name"], xgb.summary["run_path"]):
        found = orc.results(key)
        assert isinstance(found, dict) and found["metrics"] == xgb.summary["metrics"], key
    code, out, _ = cli("results", ran.job_id, "--format", "json")
    assert code == 0 and json.loads(out) == orc.results(ran.job_id)

    # two runs side by side, by their folders (each run's home is its own): the table and
    # the plot where it was asked for
    plot = tmp_path / "xgb-vs-lgbm.png"
    compared = orc.results(xgb.summary["run_path"], lgbm.summary["run_path"], plot=plot)
    assert isinstance(compared, orc.Comparison)
    assert compared.table["runs"] == [xgb.summary["name"], lgbm.summary["name"]]
    assert [s["name"] for s in compared.summaries] == compared.table["runs"]
    assert compared.table["plot"] == str(plot) and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out, _ = cli("results", xgb.summary["run_path"], lgbm.summary["run_path"],
                       "--plot", str(tmp_path / "cli.png"), "--format", "json")
    assert code == 0
    printed = json.loads(out)
    assert {k: v for k, v in printed.items() if k != "plot"} == \
        {k: v for k, v in dict(compared.table, summaries=compared.summaries).items()
         if k != "plot"}

    # a mistake is the project's own error, with its message; nothing printed, no exit
    with pytest.raises(JobError, match="no results for 'no-such-run'"):
        orc.results("no-such-run")
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(xgb.path).read_text().replace("trainer: xgboost", "trainer: xgbost"))
    with pytest.raises(SpecError) as refused:
        orc.run(bad)
    assert "trainer" in str(refused.value) and "xgbost" in str(refused.value)
    with pytest.raises(OrchestrateError):
        orc.results()
    assert orc.status() == []   # no cluster recorded in this home
    assert capsys.readouterr() == ("", "")
