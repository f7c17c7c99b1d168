"""What `orchestrate run` shows while following a job (run.progress), fed the lines a job
prints: no Ray needed. The job's own tests (tests/workload/test_tracking.py) see it on real runs."""
from __future__ import annotations

import io
import stat

from orchestrator import contract
from orchestrator.run import progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def display(tmp_path, mode, epochs=5):
    out, clock = io.StringIO(), Clock()
    shown = progress.Display(mode, epochs=epochs, log_path=tmp_path / "logs" / "job.log",
                             hide=lambda text: text.replace("s3cr3t", "***"), out=out, now=clock)
    return shown, out, clock


RAY_NOISE = ["Running Dataset: dataset_3_0. Active & requested resources: 1/2 CPU",
             "(TrainController pid=123) Attempting to start training worker group of size 2",
             "token s3cr3t in a user's print"]


def test_lines_mode_prints_one_line_per_epoch_and_keeps_the_whole_log(tmp_path):
    shown, out, clock = display(tmp_path, progress.LINES)
    for epoch in (1, 2):
        for line in RAY_NOISE:
            shown.on_line(line)
        clock.now += 10
        shown.on_line(contract.epoch_line({"epoch": epoch, "loss": 0.5 / epoch, "accuracy": 0.8,
                                           "checkpoint": "/x"}))
    shown.on_line(contract.result_line({"status": "SUCCEEDED"}))
    shown.close()
    lines = out.getvalue().splitlines()
    assert lines == ["» epoch 1/5  loss 0.5  accuracy 0.8", "» epoch 2/5  loss 0.25  accuracy 0.8"]
    log = tmp_path / "logs" / "job.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    text = log.read_text()
    assert RAY_NOISE[1] in text and "s3cr3t" not in text and "token *** in" in text
    assert "\x1b" not in out.getvalue()  # no terminal codes off a terminal


def test_verbose_streams_every_line_but_the_result(tmp_path):
    shown, out, _ = display(tmp_path, progress.VERBOSE)
    for line in RAY_NOISE:
        shown.on_line(line)
    shown.on_line(contract.epoch_line({"epoch": 1, "loss": 0.5}))
    shown.on_line(contract.result_line({"status": "SUCCEEDED"}))
    shown.close()
    assert out.getvalue().splitlines() == RAY_NOISE[:2] + ["token *** in a user's print",
                                                         "» epoch 1/5  loss 0.5"]


def test_live_status_line_counts_epochs_elapsed_and_what_is_left(tmp_path):
    shown, out, clock = display(tmp_path, progress.LIVE, epochs=4)
    shown.on_line("starting the worker group")
    assert out.getvalue().endswith("starting · 0:00 elapsed")
    clock.now += 30                                   # the first epoch took 30 s with the start
    shown.on_line(contract.epoch_line({"epoch": 1, "loss": 0.5}))
    clock.now += 10
    shown.on_line(contract.epoch_line({"epoch": 2, "loss": 0.4}))   # then 10 s per epoch
    status = out.getvalue().rsplit("\r\x1b[K", 1)[-1]
    assert status == "epoch 2/4 · 0:40 elapsed · about 0:20 left"
    assert "» epoch 2/4  loss 0.4\n" in out.getvalue()   # the epoch stays, above the status
    shown.close()
    assert out.getvalue().endswith("\r\x1b[K")          # the status line cleared at the end


def test_tune_trials_states_and_their_epochs(tmp_path):
    shown, out, clock = display(tmp_path, progress.LINES, epochs=2)
    for trial, lr in (("a1", 0.1), ("b2", 0.01)):
        shown.on_line(contract.trial_line({"trial": trial, "state": "PENDING",
                                           "config": {"train_loop_config.lr": lr}}))
    shown.on_line(contract.trial_line({"trial": "a1", "state": "RUNNING",
                                       "config": {"train_loop_config.lr": 0.1}}))
    clock.now += 5
    shown.on_line(contract.epoch_line({"epoch": 1, "loss": 0.3, "trial": "a1"}))
    assert shown.status_text() == "trials 1 pending, 1 running · 0:05 elapsed · about 0:15 left"
    shown.on_line(contract.trial_line({"trial": "a1", "state": "TERMINATED",
                                       "config": {"train_loop_config.lr": 0.1}}))
    shown.close()
    assert out.getvalue().splitlines() == [
        "trial a1  pending  lr=0.1", "trial b2  pending  lr=0.01", "trial a1  running  lr=0.1",
        "» trial a1  epoch 1/2  loss 0.3", "trial a1  terminated  lr=0.1"]


def test_total_epochs_from_the_config():
    assert progress.total_epochs({"trainer": "torch", "train_loop_config": {"epochs": 7}}) == 7
    assert progress.total_epochs({"trainer": "xgboost", "num_boost_round": 20}) == 20
    assert progress.total_epochs({"trainer": "torch", "train_loop": "m:f"}) is None
    assert progress.clock(3725) == "1:02:05" and progress.clock(65) == "1:05"
