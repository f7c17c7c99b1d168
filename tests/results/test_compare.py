"""Runs side by side and a sweep's trials ranked (results.compare), from summaries and histories as
runs leave them; the plots' axes. No Ray: the runs themselves are in tests/workload/test_tracking.py."""
from __future__ import annotations

from orchestrator.results import compare
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


def torch_history(lr: float, epochs: int = 3) -> list[dict]:
    """As the built-in loop reports: the validation loss and accuracy, the training loss."""
    return [{"epoch": e, "train_loss": lr / e, "samples_per_second": 9.0, "loss": 2 * lr / e,
             "accuracy": 1 - lr / e, "checkpoint": f"/c{e}"} for e in range(1, epochs + 1)]


def boosting_history(rounds: int = 4) -> list[dict]:
    return [{"train-logloss": 0.5 / r, "valid-logloss": 0.6 / r, "train-error": 0.1 / r,
             "valid-error": 0.2 / r} for r in range(1, rounds + 1)]


def laid_out(drawn) -> dict:
    """What a reader sees of the figure: each panel's visible x ticks, its lines' colours and
    markers, the legend's texts; asserting the legend lies inside the figure and clear of every
    panel (with its tick labels and axis labels)."""
    drawn.canvas.draw()
    renderer = drawn.canvas.get_renderer()
    (legend,) = drawn.legends
    box, page = legend.get_window_extent(renderer), drawn.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    panels = []
    for axis in drawn.axes:
        assert not box.overlaps(axis.get_tightbbox(renderer)), "the legend covers a panel"
        low, high = axis.get_xlim()
        panels.append({"ticks": [t for t in axis.get_xticks() if low <= t <= high],
                       "lines": [(line.get_color(), line.get_marker()) for line in axis.get_lines()],
                       "ylabel": axis.get_ylabel()})
    from matplotlib import pyplot

    texts = [t.get_text() for t in legend.get_texts()]
    pyplot.close(drawn)
    return {"panels": panels, "legend": texts}


def assert_whole_epochs(seen: dict, epochs: list[int]) -> None:
    for panel in seen["panels"]:
        assert panel["ticks"] == epochs


def test_one_run_a_panel_per_metric_its_twin_in_another_colour_and_marker():
    seen = laid_out(results.figure({"": torch_history(0.1, 5)}, "run"))
    assert [p["ylabel"] for p in seen["panels"]] == ["loss", "accuracy"]
    assert_whole_epochs(seen, [1, 2, 3, 4, 5])
    (loss, train_loss), (accuracy,) = (p["lines"] for p in seen["panels"])
    assert loss[0] != train_loss[0] and loss[1] != train_loss[1]
    assert seen["legend"] == ["loss, accuracy", "train_loss"]
    boosting = laid_out(results.figure({"": boosting_history()}, "xgb"))
    assert [p["ylabel"] for p in boosting["panels"]] == ["logloss", "error"]
    assert boosting["legend"] == ["valid-logloss, valid-error", "train-logloss, train-error"]
    assert_whole_epochs(boosting, [1, 2, 3, 4])
    assert results.overlay({"": [{"epoch": 1, "other": 1}]}, "nothing to draw") is None


def test_runs_compared_are_named_and_coloured_apart_with_the_legend_outside_the_curves():
    summaries = [{"name": "mlp"}, {"name": "lr-large"}]
    curves = compare.curves(summaries, [torch_history(0.01), torch_history(0.03, 2)],
                            {"train_loop_config.lr": [0.01, 0.03]})
    assert list(curves) == ["mlp lr=0.01", "lr-large lr=0.03"]
    seen = laid_out(results.figure(curves, "mlp vs lr-large"))
    assert seen["legend"] == ["mlp lr=0.01", "lr-large lr=0.03", "loss, accuracy", "train_loss"]
    assert_whole_epochs(seen, [1, 2, 3])
    lines = seen["panels"][0]["lines"]   # mlp's loss, train_loss; lr-large's
    assert len(set(lines)) == 4 and lines[0][1] != lines[1][1]
    assert len({colour for colour, _ in lines}) == 4

    many = [{"name": f"sweep-{i}"} for i in range(8)]
    curves = compare.curves(many, [torch_history(0.01 * (i + 1), 6) for i in range(8)],
                            {"train_loop_config.lr": [0.01 * (i + 1) for i in range(8)],
                             "model.hidden_dims": [[16 * (i + 1), 8] for i in range(8)]})
    assert list(curves) == [f"sweep-{i}" for i in range(8)]   # the values too long to join
    seen = laid_out(results.figure(curves, " vs ".join(curves)))
    assert seen["legend"][:8] == list(curves)
    assert len({colour for colour, _ in seen["panels"][1]["lines"]}) == 8

    long = [{"name": "an-experiment-with-a-name-longer-than-any-legend-has-room-for-" + str(i)}
            for i in range(3)]
    curves = compare.curves(long, [torch_history(0.1)] * 3, {"datasets.train": ["a" * 60] * 3})
    seen = laid_out(results.figure(curves, "long"))
    assert all(len(text) <= results.LABEL_CHARACTERS for text in seen["legend"])
    assert seen["legend"][0].endswith("…")
    # a long name with short parameters: the name is cut, the parameters that differ stay
    named = compare.curves([{"name": "vit-cifar10-dataloader-" + "x" * 20}] * 2,
                           [torch_history(0.1)] * 2, {"train_loop_config.lr": [0.0003, 0.001]})
    seen = laid_out(results.figure(named, "cut"))
    assert [t.rsplit(" ", 1)[-1] for t in seen["legend"][:2]] == ["lr=0.0003", "lr=0.001"]
    assert all(len(t) <= results.LABEL_CHARACTERS and "…" in t for t in seen["legend"][:2])

    # a sweep of 24 trials: every trial a colour of its own
    sweep = compare.curves([{"name": f"t{i}"} for i in range(24)],
                           [torch_history(0.01 * (i + 1), 2) for i in range(24)], {})
    seen = laid_out(results.figure(sweep, "sweep"))
    assert len({colour for colour, _ in seen["panels"][1]["lines"]}) == 24


def test_one_epoch_runs_and_trials_are_points_over_a_whole_epoch():
    curves = {results.curve_label(f"4a2b1_0000{i}", {"train_loop_config.lr": lr}):
              torch_history(lr, 1) for i, lr in enumerate((0.001, 0.05))}
    seen = laid_out(results.figure(curves, "2 trials"))
    assert_whole_epochs(seen, [1])
    assert seen["legend"][:2] == ["4a2b1_00000 lr=0.001", "4a2b1_00001 lr=0.05"]
    assert len(set(seen["panels"][0]["lines"])) == 4   # each trial's loss and train_loss apart
    drawn = results.figure(curves, "2 trials")
    xs = [float(line.get_xdata()[0]) for line in drawn.axes[0].get_lines()]
    assert len(set(xs)) == 4 and all(0.5 < x < 1.5 for x in xs)   # side by side, not stacked
    laid_out(drawn)
    alone = laid_out(results.figure({"": torch_history(0.1, 1)}, "one epoch"))
    assert_whole_epochs(alone, [1])
    assert compare.overlay([{"name": "a"}, {"name": "b"}], [torch_history(0.1), torch_history(0.2)],
                           {"train_loop_config.lr": [0.1, 0.2]}).startswith(b"\x89PNG")


def test_parameters_compared_as_written_also_in_summaries_from_before():
    package = "/tmp/ray/session_2026/runtime_resources/working_dir_files/_ray_pkg_{}/data/t.csv"
    older = [{"name": n, "params": {"train_loop_config.lr": lr, "datasets.train": package.format(h),
                                    "orchestrate.experiment_sha256": h * 8}}
             for n, lr, h in (("a", 0.01, "0a1b2c3d"), ("b", 0.03, "4e5f6a7b"))]
    table = compare.comparison(older, [[], []])
    assert table["params"] == {"train_loop_config.lr": [0.01, 0.03]}
    older[1]["params"]["datasets.train"] = "s3://bucket/t.csv"
    assert compare.comparison(older, [[], []])["params"]["datasets.train"] == \
        ["data/t.csv", "s3://bucket/t.csv"]


def test_dotted_parameters():
    assert flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": {}}) == {"a.b": 1, "a.c.d": [1, 2]}
    assert differing([{"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 1}]) == ["b", "c"]
