"""A run's phase breakdown from the driver's marks, the epochs' report times and the clocks."""
from __future__ import annotations

from orchestrator import contract
from orchestrator.run import phases
from orchestrator.workload.timing import REPORTED


def epoch(at: float, number: int) -> str:
    return "(TrainController pid=1) " + contract.epoch_line({"epoch": number, "loss": 0.5,
                                                             REPORTED: at})


def test_each_phase_is_the_difference_of_its_two_marks_and_end_is_the_rest():
    timing = {"process": 101.0, "main": 101.5, "connected": 102.0, "data": 105.0,
              "fit": 105.0, "fitted": 114.0, "results": 114.5}
    log = "\n".join(["noise", epoch(110.0, 1), "other", epoch(112.0, 2), epoch(113.0, 3)])
    found = phases.breakdown(timing, log, job_start=100.0, submit=0.6, wall=16.0)
    assert found == {"submit": 0.6, "job start": 1.0, "driver": 1.0, "data": 3.0,
                     "workers": 5.0, "epochs": 3.0, "shutdown": 1.0, "results": 0.5,
                     "end": 0.9}
    assert phases.text(found).startswith("submit 0.6, job start 1, driver 1, data 3, workers 5")


def test_missing_marks_leave_their_phases_out_and_their_time_in_end():
    """A Tune sweep's driver marks neither `connected` nor `fit`; an older orchestrate on the
    cluster sends no timing at all; nothing is negative."""
    found = phases.breakdown({"main": 100.5, "results": 110.0}, epoch(105.0, 1), None,
                             submit=1.0, wall=12.0)
    assert found == {"submit": 1.0, "end": 11.0}
    assert phases.breakdown(None, "", None, submit=0.5, wall=0.2) == {"submit": 0.5, "end": 0.0}


def test_the_report_time_is_no_metric_on_the_screen():
    from orchestrator.run.progress import epoch_text

    row = contract.parse_epoch(epoch(1.7e9, 2))
    assert row is not None and "reported" not in epoch_text(row)
