"""A job that fails on the embedded Ray keeps its log and its reason after that Ray stops:
`orchestrate logs` and `orchestrate runs` tell why it failed (issue 31). One embedded Ray of its
own (this test is about that Ray's end), one small job."""
from __future__ import annotations

import contextlib
import io
import json

import pytest
import yaml

from orchestrator.reach import embedded
from orchestrator.state import State
from tests.helpers import jobs_client

pytestmark = [pytest.mark.ray, pytest.mark.own_ray]


def cli(*args: str) -> tuple[int, str, str]:
    from orchestrator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_a_failed_jobs_log_and_reason_outlive_the_embedded_ray(tmp_path):
    path = tmp_path / "bad-path.yaml"   # Ray Data cannot find its file: fails in seconds
    path.write_text(yaml.safe_dump({
        "name": "bad-path", "trainer": "xgboost", "label_column": "target",
        "datasets": {"train": {"format": "csv", "path": "file:///nonexistent/x.csv"}},
        "params": {"objective": "binary:logistic"}, "num_boost_round": 1,
        "run_config": {"storage_path": str(tmp_path / "results")}}))
    try:
        code, out, err = cli("run", str(path), "--detach")
        assert code == 0, err
        job_id = out.strip()
        ray = embedded.current(State.here().secrets)
        assert jobs_client(ray)._wait(job_id) == "FAILED"
        assert cli("stop", "--local-ray")[0] == 0
        assert embedded.current(State.here().secrets) is None
    finally:
        embedded.shutdown(State.here().secrets)   # whatever failed, no Ray is left running

    code, out, err = cli("logs", job_id)
    assert code == 0, err
    assert "FileNotFoundError: /nonexistent/x.csv" in out
    assert f"the embedded Ray no longer has job {job_id} (FAILED)" in err
    code, out, _ = cli("runs", "--format", "json")
    [row] = [r for r in json.loads(out) if r["job_id"] == job_id]
    assert row["status"] == "FAILED"
    assert row["error"] == f"job {job_id} failed: FileNotFoundError: /nonexistent/x.csv"
