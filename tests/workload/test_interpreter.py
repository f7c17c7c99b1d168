"""The job's entrypoint runs under the Python that Ray runs with (the `ray` command's shebang),
not whatever `python` a login shell puts first; and each worker's Gloo/NCCL interface is the one
that carries the node's Ray address."""
from __future__ import annotations

import os
import socket
import subprocess

import pytest

from orchestrator import contract
from orchestrator.workload import network, worker


def _script(path, text):
    path.write_text(text)
    path.chmod(0o755)
    return path


def _entrypoint(path: str, **env: str) -> str:
    done = subprocess.run(["sh", "-c", contract.ENTRYPOINT], env={"PATH": path, **env},
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


def test_in_the_virtualenv_ray_made_for_pip_its_python_is_used(bins, tmp_path):
    """`runtime_env.pip`: Ray activates a virtualenv of its own (no `ray` command in it when Ray
    was not in a virtualenv itself); the driver must import the job's packages from it. A
    user's virtualenv that `ray start` happened to inherit is not taken."""
    shims, ray_bin, ray_python = bins
    _script(ray_bin / "ray", f"#!{ray_python}\nfrom ray.scripts.scripts import main\n")
    path = f"{shims}:{ray_bin}:/usr/bin:/bin"
    for owner, expected in (("session_1/runtime_resources/pip/abc", "job venv python"),
                            ("home/me/project", "ray python")):
        venv = tmp_path / owner / "virtualenv"
        (venv / "bin").mkdir(parents=True)
        _script(venv / "bin" / "python", f"#!/bin/sh\necho {expected} \"$@\"\n")
        assert _entrypoint(path, VIRTUAL_ENV=str(venv)) == \
            f"{expected} -m {contract.WORKLOAD_MODULE}", owner


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
    assert module == worker.__name__ and getattr(worker, function) is worker.setup


def test_the_setup_hook_loads_the_shipped_secrets(monkeypatch):
    """What `run.secrets.shipped` writes is what the job's processes read (Ray puts the
    package's folder on sys.path; here, the test does). A job that expects secrets and does not
    find them fails, rather than run without them."""
    import sys
    from pathlib import Path

    from orchestrator.run.secrets import shipped

    monkeypatch.setenv("API_KEY", "before")   # set, so that monkeypatch restores its absence
    monkeypatch.delenv("API_KEY")
    monkeypatch.setenv(contract.SECRET_NAMES_ENV, "API_KEY")
    monkeypatch.setattr(network, "setup", lambda: None)   # the interface part is tested above
    try:
        with shipped({"py_modules": []}, {"API_KEY": "CI_KEY"}, {"CI_KEY": "v@lue"}) as env:
            monkeypatch.syspath_prepend(str(Path(env["py_modules"][0]).parent))
            worker.setup()
        assert os.environ["API_KEY"] == "v@lue"
    finally:
        sys.modules.pop(contract.SECRETS_MODULE, None)
    with pytest.raises(RuntimeError, match=r"the job's secret variables \(API_KEY\) did not "
                                           r"reach this process"):
        worker.load_secrets()
    monkeypatch.delenv(contract.SECRET_NAMES_ENV)
    assert worker.load_secrets() == {}   # a job without secrets looks for none


def test_secret_values_are_hidden_in_text():
    secrets = {"A": "hunter2-long", "B": "hunter2", "C": "abc"}
    assert worker.hide("x hunter2-long y hunter2 z abc", secrets) == "x *** y *** z abc"
