"""pytest-xdist's `--dist loadgroup`, giving a worker more work only while it holds at most one
test besides the one it runs, not two (a pytest plugin; tests/conftest.py loads it).

xdist gives a worker more work while it holds at most two tests, so a worker that has run
its group down to two tests takes a third: in the ssh tier the worker with the shared cluster's
group took the head-dies fault test while it still held two tests of the group, and ended 104 s
after the other (CI run of 2026-11-29). Replaying three CI runs' durations with one test
ahead ends the later worker about 30 s sooner (1053 s against 1083 s, 1003 against 1034, 1041
against 1069). A worker needs the test after the one it runs (pytest's `nextitem`, for its
teardown), so one ahead is the least it can hold.
"""
from __future__ import annotations

import pytest

AHEAD = 1   # tests a worker holds beyond the one it runs, before it is given more


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class OneAhead(LoadGroupScheduling):
        """LoadGroupScheduling whose `_reschedule` (xdist 3.8, pinned) waits for AHEAD, not 2."""

        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > AHEAD:
                return
            self._assign_work_unit(node)

    return OneAhead(config, log)
