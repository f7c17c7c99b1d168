"""One running 3-host cluster for the tests of this package (package scope: it comes up for the
first of them and goes down after the last, not at the end of the session).

    ssh_cluster   a local-provider cluster launched with `orchestrate up` from
                  cluster_configs/local.yaml itself, only its addresses and key filled in
                  (and `profiling: true`):
                  .address, .headers, .token, .name, .file, .env, .cli(...), .open()
    shared_dir    a folder every host sees, like an NFS share
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from ..conftest import SYSTEM_PYTHON, cli_env, launch, orchestrate, tear_down


@pytest.fixture(scope="package")
def ssh_cluster(make_machine, tmp_path_factory):
    """A running local-provider cluster: head + 2 workers on simulated hosts, token auth on.

    The hosts are as found in the wild: on the head, the login shell puts a `python` without
    Ray first (as a pyenv `.bashrc` does); the head's and the first worker's hostnames resolve to
    127.0.1.1 (Debian's default /etc/hosts line), the last worker's to its own address."""
    shims = tmp_path_factory.mktemp("shims")
    for name in ("python", "python3"):
        (shims / name).symlink_to(SYSTEM_PYTHON)
    machine = make_machine(options={1: {"python_first": shims, "hostname_resolves_to": "127.0.1.1"},
                                    2: {"hostname_resolves_to": "127.0.1.1"}})
    home = tmp_path_factory.mktemp("orchestrate-home")
    name = f"t-{machine.name}"
    handle = None
    try:
        # `profiling: true` (issue 33), as a user adds it: test_profile.py profiles a run
        handle = launch(machine, home, name, profiling=True)
        yield handle
    finally:
        if handle is not None:
            tear_down(handle)
        else:
            orchestrate(cli_env(home), "down", name, "-y")


@pytest.fixture
def shared_dir(ssh_cluster):
    """A folder every host sees, like an NFS share (storage_path, absolute datasets)."""
    folder = Path(tempfile.mkdtemp(prefix="orc-shared-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
