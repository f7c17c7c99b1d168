"""The forward folders (`/tmp/orc-fwd-PID-*`, a Unix socket's folder for `ssh -L`) of processes
that died without unwinding (SIGKILL: their ssh dies with them, the folder stays) are removed by
the next forward; nothing else is: not a live process's, not another user's, never what a link
points at. On a folder of the test's own standing in for /tmp."""
from __future__ import annotations

import os
import subprocess
import sys

from orchestrator.launch.head import FORWARD_PREFIX, sweep_forward_folders


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_only_the_folders_of_gone_processes_are_removed(tmp_path):
    gone = dead_pid()
    left = tmp_path / f"{FORWARD_PREFIX}{gone}-abc"
    left.mkdir(mode=0o700)
    (left / "dashboard").write_text("")   # as a socket ssh did not remove
    mine = tmp_path / f"{FORWARD_PREFIX}{os.getpid()}-def"
    mine.mkdir(mode=0o700)
    target = tmp_path / "not-a-forward"
    target.mkdir()
    (target / "keep").write_text("kept")
    link = tmp_path / f"{FORWARD_PREFIX}{gone}-link"
    link.symlink_to(target)
    named_otherwise = tmp_path / f"{FORWARD_PREFIX}abc"   # an older name: no pid to ask
    named_otherwise.mkdir()
    a_file = tmp_path / f"{FORWARD_PREFIX}{gone}-file"
    a_file.write_text("")
    theirs = tmp_path / f"{FORWARD_PREFIX}{gone}-theirs"
    theirs.mkdir()
    if os.geteuid() == 0:   # nobody's: root may give it away (else it is this user's: swept)
        os.chown(theirs, 65534, 65534)

    swept = sorted(sweep_forward_folders(str(tmp_path)))
    assert swept == sorted([str(left)] + ([] if os.geteuid() == 0 else [str(theirs)]))
    assert not left.exists()
    assert mine.is_dir() and named_otherwise.is_dir() and a_file.is_file()
    assert theirs.is_dir() == (os.geteuid() == 0)
    assert link.is_symlink() and (target / "keep").read_text() == "kept"


def test_pid_1_is_alive_whoever_owns_it(tmp_path):
    init = tmp_path / f"{FORWARD_PREFIX}1-abc"
    init.mkdir()
    assert sweep_forward_folders(str(tmp_path)) == [] and init.is_dir()
