"""The embedded Ray's record is data: a damaged one (pid, temp dir) is never acted on."""
from __future__ import annotations

import os

import pytest


@pytest.mark.parametrize("temp_dir", ["", "/", "/tmp", "/tmp/orc-", "/home/x", "/tmp/orc-a/../..",
                                      "/var/tmp/orc-a"])
def test_a_damaged_record_is_not_acted_on(tmp_path, monkeypatch, temp_dir):
    """A record whose temp dir is not an embedded Ray's (/tmp/orc-*) is read as no record, and
    `stop` refuses it before signalling or removing anything."""
    import json as _json

    from orchestrator.errors import JobError
    from orchestrator.reach import embedded

    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    record = {"address": "http://127.0.0.1:8265", "gcs_address": "127.0.0.1:6379",
              "pid": os.getpid(), "temp_dir": temp_dir, "num_cpus": 2}
    (embedded._folder() / "record.json").write_text(_json.dumps(record))
    assert embedded.recorded() is None
    with pytest.raises(JobError, match="record is damaged"):
        embedded.stop(embedded.EmbeddedRay(**record))
    good = {**record, "pid": 12345, "temp_dir": "/tmp/orc-abc/ray"}
    (embedded._folder() / "record.json").write_text(_json.dumps(good))
    assert embedded.recorded() == embedded.EmbeddedRay(**good)


def test_a_record_whose_dashboard_is_not_on_loopback_is_none(tmp_path, monkeypatch):
    import json as _json

    from orchestrator.reach import embedded

    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    record = {"address": "http://10.0.0.9:8265", "gcs_address": "127.0.0.1:6379",
              "pid": 12345, "temp_dir": "/tmp/orc-abc/ray", "num_cpus": 2}
    (embedded._folder() / "record.json").write_text(_json.dumps(record))
    assert embedded.recorded() is None

