"""The forward folders (`/tmp/orc-fwd-NS-PID-*`, a Unix socket's folder for `ssh -L`) of processes
that died without unwinding (SIGKILL: their ssh dies with them, the folder stays) are removed by
the next forward; nothing else is: not a live process's, not one of another PID namespace (whose
pids cannot be asked about), not another user's, not an older name, never what a link points
at. On a folder of the test's own standing in for /tmp. (tests/launch/test_forward.py checks, over
real SSH, that a forward names its folder so and sweeps before it makes one.)"""
from __future__ import annotations

import os
import subprocess
import sys

from orchestrator.launch.ray_up.head import forward_folder_prefix, sweep_forward_folders


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_only_the_folders_of_gone_processes_of_this_namespace_are_removed(tmp_path):
    here = forward_folder_prefix()                     # orc-fwd-NS-PID-
    namespace = here.split("-")[2]
    gone = dead_pid()
    left = tmp_path / f"orc-fwd-{namespace}-{gone}-abc_9"
    left.mkdir(mode=0o700)
    (left / "dashboard").write_text("")   # as a socket ssh did not remove
    mine = tmp_path / f"{here}def"
    mine.mkdir(mode=0o700)
    elsewhere = tmp_path / f"orc-fwd-{int(namespace) + 1}-{gone}-ghi"   # another namespace's
    elsewhere.mkdir()
    target = tmp_path / "not-a-forward"
    target.mkdir()
    (target / "keep").write_text("kept")
    link = tmp_path / f"orc-fwd-{namespace}-{gone}-link"
    link.symlink_to(target)
    older = tmp_path / "orc-fwd-12345678"   # an older version's name: no pid in it
    older.mkdir()
    a_file = tmp_path / f"orc-fwd-{namespace}-{gone}-file"
    a_file.write_text("")
    odd = tmp_path / f"orc-fwd-{namespace}-\u00b2-x"   # a digit to str.isdigit, not to int()
    odd.mkdir()
    theirs = tmp_path / f"orc-fwd-{namespace}-{gone}-theirs"
    theirs.mkdir()
    if os.geteuid() == 0:   # nobody's: root may give it away (else it is this user's: swept)
        os.chown(theirs, 65534, 65534)

    swept = sorted(sweep_forward_folders(str(tmp_path)))
    assert swept == sorted([str(left)] + ([] if os.geteuid() == 0 else [str(theirs)]))
    assert not left.exists()
    assert mine.is_dir() and elsewhere.is_dir() and older.is_dir() and odd.is_dir()
    assert a_file.is_file() and theirs.is_dir() == (os.geteuid() == 0)
    assert link.is_symlink() and (target / "keep").read_text() == "kept"


def test_a_pid_that_cannot_be_is_left_and_a_tmp_that_cannot_be_read_is_no_error(tmp_path):
    namespace = forward_folder_prefix().split("-")[2]
    huge = tmp_path / f"orc-fwd-{namespace}-9999999999-abc"   # past any pid: os.kill overflows
    huge.mkdir()
    init = tmp_path / f"orc-fwd-{namespace}-1-abc"
    init.mkdir()
    assert sweep_forward_folders(str(tmp_path)) == [] and huge.is_dir() and init.is_dir()
    assert sweep_forward_folders(str(tmp_path / "missing")) == []
