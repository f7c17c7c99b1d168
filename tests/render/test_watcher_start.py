"""The head's watcher start command, run by a real shell: it finds the Python that runs `ray`
from the script's first line, or beside the script when pip wrote `#!/bin/sh` there (long
interpreter paths), and returns at once, leaving the watcher running."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.render.cluster import WATCHER_START


def fake_bin(folder: Path, first_line: str) -> Path:
    """A `ray` script with `first_line`, and a `python` beside it that records how it ran."""
    folder.mkdir(parents=True)
    (folder / "ray").write_text(f"{first_line}\nexit 0\n")
    said = folder / "ran"
    # written whole, then renamed: the test must not read it half written (seen in CI: empty)
    (folder / "python").write_text(f"#!/bin/sh\necho \"$0 $*\" > {said}.part && "
                                   f"mv {said}.part {said}\n")
    for name in ("ray", "python"):
        (folder / name).chmod(0o755)
    return said


@pytest.mark.parametrize("long_path", [False, True], ids=["shebang", "sh-exec-trick"])
def test_the_watcher_starts_with_rays_python(tmp_path, long_path):
    home = tmp_path / "home"
    (home / ".orchestrate").mkdir(parents=True)
    folder = tmp_path / "venv" / "bin"
    said = fake_bin(folder, "#!/bin/sh\n'''exec' \"$0\" \"$@\"" if long_path
                    else f"#!{tmp_path / 'venv' / 'bin' / 'python'}")
    done = subprocess.run(["bash", "-c", WATCHER_START], env={
        "HOME": str(home), "PATH": f"{folder}:/usr/bin:/bin"}, timeout=30, capture_output=True,
        text=True)
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 10
    while not said.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert said.read_text().strip() == f"{folder / 'python'} -m head.autostop"
