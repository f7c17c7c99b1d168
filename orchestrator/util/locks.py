"""An exclusive lock on a file (filelock, an flock on Linux: released when its holder dies),
with a note beside it that names the holder, so a refused caller can say who holds it."""
from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import require


class Busy(Exception):
    """The lock is held by someone else; `holder` is what they wrote (may be empty)."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


@contextlib.contextmanager
def held(path: Path, *, action: str, timeout: float = 0) -> Iterator[None]:
    """Hold the lock at `path` for the block. `timeout` 0: raise Busy at once if it is taken;
    below 0: wait as long as it takes."""
    require("filelock", "filelock", "ray")
    import filelock

    lock = filelock.FileLock(str(path), timeout=timeout, mode=0o600)
    note = path.with_name(path.name + ".holder")
    try:
        lock.acquire()
    except filelock.Timeout:
        raise Busy(_holder(note)) from None
    mine = f"{action}, pid {os.getpid()} on {socket.gethostname()}\n"
    try:
        note.write_text(mine)
        yield
    finally:
        with contextlib.suppress(OSError):
            if note.read_text() == mine:  # a later holder's note stays
                note.unlink()
        lock.release()


def _holder(note: Path, patience: float = 1.0) -> str:
    """What the holder wrote beside the lock. It writes that just after taking the lock: a
    caller refused in between waits up to `patience` seconds for it ("" if it never comes)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            holder = note.read_text().strip()
        except OSError:
            holder = ""
        if holder or time.monotonic() >= deadline:
            return holder
        time.sleep(0.05)
