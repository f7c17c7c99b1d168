"""`orchestrate runs`' filter by cluster: a run on the embedded Ray is shown as `embedded`, and
`--cluster local` (what that column said before 0.2.0) still finds it. No Ray: the records only."""
from __future__ import annotations

from orchestrator.results import runs
from orchestrator.state import State


def test_the_embedded_rays_runs_are_named_embedded_and_found_by_the_old_name_too(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    state = State.here()
    state.store.record_job("job-a", cluster=None, experiment="/x/a.yaml", name="a")
    state.store.record_job("job-b", cluster="gpu", experiment="/x/b.yaml", name="b")

    everything = runs.recorded(state)
    assert {r["job_id"]: r["cluster"] for r in everything} == {"job-a": "embedded", "job-b": "gpu"}
    for asked in ("embedded", "local"):
        assert [r["job_id"] for r in runs.recorded(state, cluster=asked)] == ["job-a"]
    assert [r["job_id"] for r in runs.recorded(state, cluster="gpu")] == ["job-b"]
