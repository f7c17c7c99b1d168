"""Runs side by side and a sweep's trials ranked (jobs.compare), from summaries and histories as
runs leave them; the plots' axes. No Ray: the runs themselves are in tests/workload/test_tracking.py."""
from __future__ import annotations

from orchestrator.jobs import compare
from orchestrator.util.text import differing, flatten
from orchestrator.workload import results


def history(lr: float, epochs: int = 3) -> list[dict]:
    return [{"epoch": e, "loss": lr / e, "accuracy": 1 - lr / e, "checkpoint": f"/c{e}"}
            for e in range(1, epochs + 1)]


def test_only_the_parameters_that_differ_and_final_and_best_metrics():
    summaries = [{"name": "a", "params": {"train_loop_config.lr": 0.1, "trainer": "torch"},
                  "metrics": {"epoch": 3, "loss": 0.5, "accuracy": 0.8}},
                 {"name": "b", "params": {"train_loop_config.lr": 0.01, "trainer": "torch",
                                          "model.name": "mlp"},
                  "metrics": {"epoch": 3, "loss": 0.9, "accuracy": 0.7, "samples_per_second": 5.0}}]
    table = compare.comparison(summaries, [history(0.1), history(0.9)])
    assert table["runs"] == ["a", "b"]
    assert table["params"] == {"train_loop_config.lr": [0.1, 0.01], "model.name": [None, "mlp"]}
    assert table["final"] == {"loss": [0.5, 0.9], "accuracy": [0.8, 0.7],
                              "samples_per_second": [None, 5.0]}
    assert table["best"] == {"loss": [0.1 / 3, 0.3], "accuracy": [1 - 0.1 / 3, 1 - 0.3]}


def test_trials_ranked_by_the_tuned_metric_failed_last():
    summary = {"metric": "accuracy", "mode": "max", "trials": [
        {"trial_id": "t1", "accuracy": 0.7}, {"trial_id": "t2", "accuracy": None, "error": "x"},
        {"trial_id": "t3", "accuracy": 0.9}]}
    assert [t["trial_id"] for t in compare.trials(summary)] == ["t3", "t1", "t2"]
    summary["mode"], summary["metric"] = "min", "accuracy"
    assert [t["trial_id"] for t in compare.trials(summary)] == ["t1", "t3", "t2"]


def test_metric_directions_by_name():
    assert [compare.direction(m) for m in ("loss", "valid-logloss", "train-error", "accuracy",
                                           "samples_per_second")] == ["min", "min", "min", "max",
                                                                      None]


def test_plots_have_whole_epochs_and_one_line_per_run_and_metric():
    drawn = results.figure({"lr=0.1": history(0.1, 5), "lr=0.01": history(0.01, 3)}, "t")
    loss_axis, accuracy_axis = drawn.axes
    for axis in drawn.axes:
        assert all(float(tick).is_integer() for tick in axis.get_xticks())
    assert loss_axis.get_legend_handles_labels()[1] == ["lr=0.1", "lr=0.01"]
    assert [len(line.get_xdata()) for line in accuracy_axis.get_lines()] == [5, 3]
    from matplotlib import pyplot

    pyplot.close(drawn)
    assert results.overlay({"": [{"epoch": 1, "other": 1}]}, "nothing to draw") is None
    png = compare.overlay([{"name": "a"}, {"name": "b"}], [history(0.1), history(0.2)],
                          {"train_loop_config.lr": [0.1, 0.2]})
    assert png.startswith(b"\x89PNG")


def test_dotted_parameters():
    assert flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": {}}) == {"a.b": 1, "a.c.d": [1, 2]}
    assert differing([{"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 1}]) == ["b", "c"]
