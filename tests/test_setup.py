"""The quick start's set-up (scripts/setup.sh, with scripts/torch.sh) asks for torch's CPU build
on any machine: the install commands it runs are read from a recording `.venv/bin/python`, and
the command this machine gets is run by pip for real (`--dry-run`), so it is known to install
the CPU build here, from this machine's local wheel folder, PyTorch's index being out of reach.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INDEX = "https://download.pytorch.org/whl"

RECORDER = """#!/bin/sh
printf '%s\\n' "$*" >> "$RECORD"
case "$1" in -c) exit "$REACH";; esac
exit 0
"""
# `uname -s` / `uname -m` of another machine.
UNAME = """#!/bin/sh
case "$1" in -s) echo "$UNAME_S";; -m) echo "$UNAME_M";; esac
"""


def set_up(tmp_path: Path, reach: bool, machine: tuple[str, str] | None = None,
           **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run a copy of scripts/setup.sh whose .venv/bin/python records what it is asked to do
    (with `machine`, on another one's `uname`)."""
    (tmp_path / "scripts").mkdir()
    for name in ("setup.sh", "torch.sh"):
        shutil.copy(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(RECORDER)
    python.chmod(0o755)
    record = tmp_path / "record"
    here = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATE_TORCH")}
    if machine:
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "uname").write_text(UNAME)
        (tmp_path / "bin" / "uname").chmod(0o755)
        here.update(PATH=f"{tmp_path / 'bin'}:{here['PATH']}", UNAME_S=machine[0], UNAME_M=machine[1])
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "setup.sh")], capture_output=True,
                          text=True, timeout=60,
                          env={**here, "RECORD": str(record), "REACH": "0" if reach else "1", **env})
    calls = record.read_text().splitlines() if record.exists() else []
    return done, calls


def pip_installs(calls: list[str]) -> list[str]:
    return [call.removeprefix("-m pip install -q --disable-pip-version-check ")
            for call in calls if call.startswith("-m pip install")]


def test_the_cpu_build_from_pytorchs_index_is_the_default(tmp_path: Path) -> None:
    done, calls = set_up(tmp_path, reach=True)
    assert done.returncode == 0, done.stderr
    assert calls[0].startswith("-c ") and calls[0].endswith(f"{INDEX}/cpu/torch/")
    assert pip_installs(calls) == [f"torch==2.13.0+cpu --extra-index-url {INDEX}/cpu", "-e .[ray]"]
    assert done.stderr == ""


def test_out_of_reach_the_cpu_build_is_still_the_one_asked_for_and_it_says_so(tmp_path: Path) -> None:
    done, calls = set_up(tmp_path, reach=False)
    assert done.returncode == 0, done.stderr
    assert pip_installs(calls) == ["torch==2.13.0+cpu", "-e .[ray]"]
    assert f"PyTorch's index {INDEX}/cpu cannot be reached from here" in done.stderr


@pytest.mark.parametrize("build, wanted", [
    ("cu128", f"torch==2.13.0+cu128 --extra-index-url {INDEX}/cu128"),
    ("pypi", "torch==2.13.0"),
])
def test_a_gpu_machine_picks_its_build(tmp_path: Path, build: str, wanted: str) -> None:
    done, calls = set_up(tmp_path, reach=True, ORCHESTRATE_TORCH=build)
    assert done.returncode == 0, done.stderr
    assert pip_installs(calls) == [wanted, "-e .[ray]"]
    assert any(call.startswith("-c ") for call in calls) == (build != "pypi")


@pytest.mark.parametrize("machine", [("Darwin", "arm64"), ("Linux", "aarch64")])
def test_where_pypis_wheel_is_the_cpu_build_it_is_taken(tmp_path: Path, machine) -> None:
    """PyTorch's CPU index has no +cpu wheel for macOS or Linux on ARM; PyPI's is the CPU build."""
    done, calls = set_up(tmp_path, reach=True, machine=machine)
    assert done.returncode == 0, done.stderr
    assert pip_installs(calls) == ["torch==2.13.0", "-e .[ray]"]
    x86 = tmp_path / "x86"
    x86.mkdir()
    done, calls = set_up(x86, reach=True, machine=("Linux", "x86_64"))
    assert pip_installs(calls)[0] == f"torch==2.13.0+cpu --extra-index-url {INDEX}/cpu"


def test_a_mirror_or_no_index(tmp_path: Path) -> None:
    done, calls = set_up(tmp_path, reach=True, ORCHESTRATE_TORCH_INDEX="https://mirror.example/whl/")
    assert pip_installs(calls)[0] == "torch==2.13.0+cpu --extra-index-url https://mirror.example/whl/cpu"
    other = tmp_path / "none"
    other.mkdir()
    done, calls = set_up(other, reach=True, ORCHESTRATE_TORCH_INDEX="none")
    assert pip_installs(calls)[0] == "torch==2.13.0+cpu"
    assert not any(call.startswith("-c ") for call in calls)   # nothing asked of any index


def test_a_build_that_is_none_installs_nothing(tmp_path: Path) -> None:
    done, calls = set_up(tmp_path, reach=True, ORCHESTRATE_TORCH="gpu")
    assert done.returncode == 2
    assert "ORCHESTRATE_TORCH=gpu is not a torch build: use cpu (the default)" in done.stderr
    assert pip_installs(calls) == []


def test_the_command_this_machine_gets_takes_the_cpu_build(tmp_path: Path) -> None:
    """The torch line of scripts/setup.sh as this machine's pip resolves it from its own local
    wheel folder (`--no-index`: no test traffic leaves the machine; nothing is installed). The
    project's machines reach no PyTorch index and take the CPU build from there."""
    links = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                           text=True, timeout=60).stdout + os.environ.get("PIP_FIND_LINKS", "")
    if "find-links" not in links and not os.environ.get("PIP_FIND_LINKS"):
        pytest.skip("pip here is told of no local wheel folder; the recorded commands above are "
                    "what this machine's set-up runs")
    script = (f"ORCHESTRATE_TORCH_INDEX=none; . {ROOT / 'scripts' / 'torch.sh'}; "
              f"torch_install_args {sys.executable}; "
              f"{sys.executable} -m pip install --dry-run --no-deps --no-index --ignore-installed "
              '-q --report - "${TORCH_ARGS[@]}"')
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    chosen = [(item["metadata"]["name"], item["metadata"]["version"])
              for item in json.loads(done.stdout)["install"]]
    assert chosen == [("torch", "2.13.0+cpu")], (chosen, done.stderr)
