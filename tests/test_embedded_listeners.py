"""The embedded Ray leaves no port to take (issue 29, point 1): Ray binds every port itself
inside a 0700 folder, and a token goes to its dashboard only while a process of its own group
holds the address. On the ray tier's shared Ray (no Ray is started here)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.errors import JobError
from orchestrator.reach import embedded
from orchestrator.state import State
from orchestrator.util import listeners
from tests.squatters import squatter

pytestmark = pytest.mark.ray

PORT_FLAGS = ("--port", "--dashboard-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port",
              "--min-worker-port", "--max-worker-port")


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def test_ray_binds_every_port_itself_in_a_private_folder(local_ray):
    """No port number is handed to `ray start` (one in /proc/*/cmdline is a name any local
    user can take first); the ports it bound are read back; no Ray Client server."""
    args = cmdline(local_ray.pid)
    given = {flag: args[args.index(flag) + 1] for flag in PORT_FLAGS}
    assert set(given.values()) == {"0"}, given
    assert "--ray-client-server-port" not in args
    group = listeners.members(local_ray.pid)
    assert not any("ray.util.client.server" in " ".join(cmdline(pid)) for pid in group)
    assert listeners.held_by(group, local_ray.address)
    assert listeners.ours(local_ray.address)
    gcs = int(local_ray.gcs_address.rsplit(":", 1)[1])
    assert gcs > 0 and any(_listens(pid, gcs) for pid in group)   # the port it wrote down
    private = Path(local_ray.temp_dir).parent
    assert stat.S_IMODE(private.stat().st_mode) == 0o700 and private.stat().st_uid == os.getuid()


def _listens(pid: int, port: int) -> bool:
    return listeners.held_by([pid], f"http://[::1]:{port}") or \
        listeners.held_by([pid], f"http://127.0.0.1:{port}")


def test_a_squatter_on_the_recorded_address_gets_no_token(local_ray, tmp_path):
    """The recorded Ray runs, but its address is held by another process (as when its
    dashboard died and someone bound the port): we used to send that process the token to ask
    whether it was ours. Now nothing is sent and `jobs` says why and exits 1. (`stop
    --embedded` would still stop that Ray: not tried here, the shared Ray is not ours to stop.)"""
    secrets = State.here().secrets
    token = secrets.read(embedded.TOKEN_KEY)
    with squatter(tmp_path / "got") as other:
        embedded._write_record(replace(local_ray, address=other.address), secrets)
        with pytest.raises(JobError, match="no token sent") as refused:
            embedded.current(secrets)
        assert "not its own" in refused.value.message
        done = subprocess.run([sys.executable, "-m", "orchestrator", "jobs"], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 1, done.stderr
        assert "no token sent" in done.stderr and "Traceback" not in done.stderr
        assert other.received == b""
        assert token not in done.stdout + done.stderr
    record = json.loads((Path(os.environ["ORCHESTRATE_HOME"]) / "local-ray" /
                         "record.json").read_text())
    assert record["pid"] == local_ray.pid   # left as it was: not taken for a dead Ray
