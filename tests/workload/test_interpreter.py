"""The job's entrypoint runs under the Python that Ray runs with (the `ray` command's shebang),
not whatever `python` a login shell puts first; and each worker's Gloo/NCCL interface is the one
that carries the node's Ray address."""
from __future__ import annotations

import os
import socket
import subprocess

import pytest

from orchestrator import contract
from orchestrator.workload import network


def _script(path, text):
    path.write_text(text)
    path.chmod(0o755)
    return path


def _entrypoint(path: str) -> str:
    done = subprocess.run(["sh", "-c", contract.ENTRYPOINT], env={"PATH": path},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def bins(tmp_path):
    shims, ray_bin = tmp_path / "shims", tmp_path / "ray bin"
    shims.mkdir()
    ray_bin.mkdir()
    # The shim a pyenv .bashrc puts first: a Python without Ray.
    _script(shims / "python", "#!/bin/sh\necho shim python \"$@\"\n")
    # The Python Ray was installed with, named by the `ray` command's shebang.
    ray_python = _script(tmp_path / "ray-python", "#!/bin/sh\necho ray python \"$@\"\n")
    return shims, ray_bin, ray_python


def test_the_job_runs_under_the_python_of_the_ray_command(bins):
    shims, ray_bin, ray_python = bins
    _script(ray_bin / "ray", f"#!{ray_python}\nfrom ray.scripts.scripts import main\n")
    system = "/usr/bin:/bin"
    assert _entrypoint(f"{shims}:{ray_bin}:{system}") == \
        f"ray python -m {contract.WORKLOAD_MODULE}"


def test_an_env_shebang_is_followed(bins, tmp_path):
    shims, ray_bin, ray_python = bins
    os.symlink(ray_python, tmp_path / "ray bin" / "python3")
    _script(ray_bin / "ray", "#!/usr/bin/env python3\nimport ray\n")
    # env looks python3 up on PATH, as the ray command itself does.
    assert _entrypoint(f"{ray_bin}:{shims}:/usr/bin:/bin") == \
        f"ray python -m {contract.WORKLOAD_MODULE}"


def test_without_a_ray_command_it_is_plain_python(bins):
    shims, _, _ = bins
    assert _entrypoint(f"{shims}:/usr/bin:/bin") == f"shim python -m {contract.WORKLOAD_MODULE}"


def test_the_interface_of_an_address():
    assert network.interface_of("127.0.0.1") == "lo"
    assert network.interface_of("192.0.2.77") is None   # TEST-NET-1: on no interface here
    names = {name for _, name in socket.if_nameindex()}
    assert "lo" in names


def test_the_setup_hook_is_in_the_jobs_runtime_env():
    from orchestrator.render.experiment import runtime_env

    env = runtime_env("{}", None, None)
    assert env["worker_process_setup_hook"] == contract.WORKER_SETUP
    module, function = contract.WORKER_SETUP.rsplit(".", 1)
    assert module == network.__name__ and callable(getattr(network, function))
