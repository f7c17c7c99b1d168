"""The suite's xdist scheduler (tests/scheduling.py) on pytest-xdist's own classes, with
stand-ins for its worker processes: a worker holds the test it runs and one more."""
from __future__ import annotations

from tests import scheduling


class Config:
    def __init__(self, dist: str) -> None:
        self.values = {"dist": dist, "tx": ["2*popen"]}
        self.option = type("Options", (), {"loadscopereorder": False})()   # as scripts/tiers.py

    def getvalue(self, name: str):
        return self.values[name]


class Worker:
    """What the scheduler asks of xdist's WorkerController."""

    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.extend(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True


TESTS = ["t_long.py::one", "t_long.py::two", "t_long.py::three",
         "t_shared.py::a@cluster", "t_shared.py::b@cluster", "t_short.py::x", "t_short.py::y"]


def names(worker: Worker) -> list[str]:
    return [TESTS[i].split("::")[1].split("@")[0] for i in worker.sent]


def test_a_worker_is_given_its_next_test_when_it_holds_one():
    scheduler = scheduling.pytest_xdist_make_scheduler(Config("loadgroup"), None)
    first, second = Worker("gw0"), Worker("gw1")
    for worker in (first, second):
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, TESTS)
    scheduler.schedule()
    # two units each to start; the group (one unit, two tests) goes whole to one worker
    assert names(first) == ["one", "three"]
    assert names(second) == ["two", "a", "b"]

    scheduler.mark_test_complete(first, TESTS.index("t_long.py::one"))
    assert names(first) == ["one", "three", "x"]
    scheduler.mark_test_complete(second, TESTS.index("t_long.py::two"))
    assert names(second) == ["two", "a", "b"]   # holds two: xdist's own rule gave it "y" here
    scheduler.mark_test_complete(first, TESTS.index("t_long.py::three"))
    assert names(first) == ["one", "three", "x", "y"]
    scheduler.mark_test_complete(first, TESTS.index("t_short.py::x"))
    assert first.shutting_down and not second.shutting_down   # nothing left to hand out


def test_other_distributions_keep_xdists_scheduler():
    assert scheduling.pytest_xdist_make_scheduler(Config("load"), None) is None
