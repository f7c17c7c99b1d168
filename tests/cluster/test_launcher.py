"""Ray's launcher run as a subprocess: private logs, secrets masked."""
from __future__ import annotations

import stat

from orchestrator.cluster import launcher


def test_launcher_logs_are_private_and_mask_secrets(tmp_path):
    log = tmp_path / "up.log"
    launcher.run_ray(["--version"], log_path=log, progress=lambda _: None, timeout=120,
                     secrets=["ray"])
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    output = log.read_text().split("\n", 2)[2]
    assert "***" in output  # the mask stands where the secret was
    assert "ray" not in output
