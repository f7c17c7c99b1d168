"""The file lock behind `up`/`down`: a refused caller names the holder, even one that has only
just taken the lock and not yet written its note."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from orchestrator.util.locks import Busy, held

# Another process takes the lock (an flock, as filelock does), and writes its note only after
# it has said "locked" and then read a line: the test decides when the note appears.
HOLDER = textwrap.dedent('''
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    if sys.stdin.readline().strip() == "note":
        open(sys.argv[1] + ".holder", "w").write("up, pid 4242 on elsewhere\\n")
    print("noted", flush=True)
    sys.stdin.readline()
''')


@pytest.fixture
def holder(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "lock")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "locked"
    yield process
    process.communicate("\n", timeout=30)


def test_a_refused_caller_names_the_holder(tmp_path, holder):
    holder.stdin.write("note\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "noted"
    with pytest.raises(Busy) as refused, held(tmp_path / "lock", action="down"):
        pass
    assert refused.value.holder == "up, pid 4242 on elsewhere"


def test_a_note_written_just_after_the_refusal_is_waited_for(tmp_path, holder):
    import threading

    timer = threading.Timer(0.3, lambda: (holder.stdin.write("note\n"), holder.stdin.flush()))
    timer.start()
    try:
        with pytest.raises(Busy) as refused, held(tmp_path / "lock", action="down"):
            pass
    finally:
        timer.join()
    assert refused.value.holder == "up, pid 4242 on elsewhere"


def test_a_holder_that_never_writes_its_note_is_not_waited_for_long(tmp_path, holder):
    with pytest.raises(Busy) as refused, held(tmp_path / "lock", action="down"):
        pass
    assert refused.value.holder == ""
    holder.stdin.write("no note\n")
    holder.stdin.flush()


def test_the_lock_is_taken_and_its_note_removed_when_free(tmp_path):
    with held(tmp_path / "lock", action="up"):
        assert "up, pid" in (tmp_path / "lock.holder").read_text()
    assert not (tmp_path / "lock.holder").exists()
