"""The suite's tiers, kept true, and what each test cost (a pytest plugin; tests/conftest.py
loads it). scripts/tiers.py runs the tiers one after another and prints the costs.

    fast  -m "not ray and not ssh"   no Ray, no SSH
    ray   -m "ray and not ssh"       the embedded Ray (scripts/tiers.py splits off `own_ray`, the
                                     local tier, and `many_runs`, the many tier)
    ssh   -m ssh                     simulated hosts, sshd, `ray up` over SSH

A tier is a marker expression, so every test is in exactly one. The markers must say what a
test starts, or a tier's time and budget mean nothing:
- at collection, a test that asks for a Ray fixture must be marked `ray`, one that asks for
  hosts or an sshd must be marked `ssh`;
- a test marked neither fails if a Ray or an sshd it started is running when it ends, or if it
  started an embedded Ray in this process;
- a test marked `ray` (and not `ssh`) without a Ray fixture fails unless it started the
  embedded Ray itself (its ORCHESTRATE_HOME then has the `local-ray` folder).

With $ORCHESTRATE_TEST_DURATIONS set, every test's time (setup, call and teardown), outcome,
xdist worker and start and stop (epoch seconds) are written there as JSON at the end of the
session.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.processes import of_this_session

RAY_FIXTURES = {"local_ray", "shared_ray", "trained"}   # a Ray, or runs trained on one
SSH_FIXTURES = {"make_machine", "ssh_cluster", "sshd", "cloud"}
# What a test marked neither must not leave running (checked in /proc, before and after).
STARTED = r"raylet|gcs_server|sshd -D|ray start"


@pytest.hookimpl(trylast=True)   # after pytest-xdist's: see _groups_in_node_ids
def pytest_collection_modifyitems(config, items) -> None:
    wrong = []
    for item in items:
        marks = {mark.name for mark in item.iter_markers()}
        names = set(getattr(item, "fixturenames", ()))
        if names & RAY_FIXTURES and "ray" not in marks:
            wrong.append(f"{item.nodeid}: uses {sorted(names & RAY_FIXTURES)} but is not marked ray")
        if names & SSH_FIXTURES and "ssh" not in marks:
            wrong.append(f"{item.nodeid}: uses {sorted(names & SSH_FIXTURES)} but is not marked ssh")
        if "own_ray" in marks and ("ray" not in marks or names & RAY_FIXTURES):
            wrong.append(f"{item.nodeid}: marked own_ray, so it must be marked ray and use none "
                         f"of {sorted(RAY_FIXTURES)}")
        if "many_runs" in marks and ("ray" not in marks or marks & {"ssh", "own_ray"}):
            wrong.append(f"{item.nodeid}: marked many_runs, so it must be marked ray, and "
                         "neither ssh nor own_ray")
        if "ssh" in marks and not names & SSH_FIXTURES:
            wrong.append(f"{item.nodeid}: marked ssh but uses none of {sorted(SSH_FIXTURES)}")
    if wrong:
        raise pytest.UsageError("markers that do not say what a test starts:\n  "
                                + "\n  ".join(wrong))
    items.sort(key=_lane)
    _groups_in_node_ids(config, items)


def _groups_in_node_ids(config, items) -> None:
    """pytest-xdist's `--dist loadgroup` sends tests to one worker by a `@GROUP` suffix of their
    node id, which it writes into `item._nodeid`; pytest 9 keeps the id in `item._id`, so the
    suffix is lost and every test goes anywhere (two workers each brought up the shared cluster
    and the fault tests' hosts). Written here where pytest 9 reads it."""
    if not getattr(config.option, "loadgroup", False):   # set on xdist's workers only
        return
    from _pytest.nodeid import NodeId

    for item in items:
        group = _group(item)
        if group is not None and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{group}")


# The ray tier runs on two pytest-xdist workers (scripts/tiers.py), each with its shared Ray. The
# tests that read the session's trained runs (the `trained` fixture) are grouped by the runs
# they read, each group on one worker: "trained-mlp" (the MLP) and "trained-boosted" (XGBoost
# and LightGBM, and every Serve application, so those share one Ray); each run is trained once.
# A test that reads them and names no group is in "trained". (The runs at once, its longest
# test, are a tier of their own: many. Long ray tests moved there too, beside the ssh tier, made
# that stage 6 minutes longer: measured 2026-11-29, the ssh tier has no idle time to give.)
# The ssh tier runs on two pytest-xdist workers (scripts/tiers.py). The tests on the shared
# 3-host cluster stay on one worker (`xdist_group("shared_cluster")`): it is launched once. Other
# modules whose tests share hosts (test_faults, test_failures, test_host_keys) are not grouped:
# their tests run on both workers, each bringing up its own hosts, which measured faster than
# one worker running them all (ssh tier 12:36 with every module grouped).
#
# Each tier hands out its longest units of work first (a group's tests together, or one test),
# the rest after them in file order: the longest-processing-time rule. A worker holds tests
# before it runs them (one ahead: tests/scheduling.py), so long tests handed out last end on
# one worker while the other waits: the three fault tests, once last, ran one after another on
# one worker while the other sat idle for 340 s of an 18:37 tier (measured 2026-11-29). With
# the long ones first and one test ahead the two ssh workers ended 42 s apart (960 s and 918 s
# of a 16:18 tier, CI run of 2026-11-29). WEIGHTS are the seconds a unit took in CI
# (test-artifacts/durations-TIER.json, beside the many tier); a new long test belongs here.
# Keys: an xdist group, `file.py::test`, or `file.py` (all its tests).
WEIGHTS = {
    # ray tier: the trained runs first (the tests that read them wait for their training)
    "trained": 1000,
    "trained-boosted": 310,
    "trained-mlp": 290,
    "trained-images": 210,   # test_images.py: its CNN trained, predicted and served
    # test_tensorflow.py: a run of 2 Keras workers, predicted and served; the user's loop (72 s
    # in CI) before the short tests, not last
    "trained-tensorflow": 245,
    "test_tensorflow.py::test_the_users_own_keras_loop_as_shipped": 72,
    "test_run_control.py::test_a_run_stopped_half_way_resumes_to_the_configured_epochs": 95,
    "test_environment.py::test_packages_variables_secrets_and_excludes_reach_the_job": 88,
    "test_predict.py::test_vit_over_ray_data_then_on_image_parquet": 86,
    "test_rayjob_submitter.py": 80,
    "test_tracking.py::test_a_tune_grid_is_a_parent_run_with_a_child_per_trial": 52,
    "test_end_to_end.py::test_user_loop_tracked_and_no_duplicate": 47,
    "test_kuberay_ray.py::test_a_kuberay_cluster_end_to_end_on_a_real_ray": 35,
    "test_s3_storage.py": 83,
    "test_end_to_end.py::test_vit_over_dataloader": 32,
    "test_end_to_end.py::test_failing_user_loop": 29,
    # ssh tier
    "shared_cluster": 460,
    "test_autostop.py": 316,
    "test_faults.py::test_a_worker_dies_then_another_is_cut_off_then_down_with_one_dead": 250,
    "test_e2e.py": 239,
    "test_cloud_aws.py::test_an_aws_cluster_goes_up_trains_scales_stops_itself_and_comes_back": 380,
    # two runners (the on-prem GitOps project's, 218 s in CI, folded in on 2026-12-03)
    "test_cloud_aws.py::test_two_runners_create_update_and_delete_an_aws_cluster_of_one_project": 260,
    "test_faults.py::test_the_head_dies_while_run_follows": 151,
    "test_host_keys.py": 57,
    "test_faults.py::test_a_worker_unreachable_during_up": 47,
    # fast tier (beside the local tier, 2026-12-03): groups of tests sharing a costly set-up, and
    # the longest tests, first, so that neither worker is left with one at its end
    "pre-commit": 25,   # test_pipelines.py: the hook's environment built once
    "test_ray_agreement.py::test_generated_files_agree_with_ray": 19,
    "keras": 15,        # test_tensorflow_units.py: Keras imported once
    "test_generated.py::test_mutated_examples_are_refused_or_render_for_ray": 14,
    "gradio": 12,       # test_demo_gate.py and test_demo_page.py: Gradio imported once
    "test_cloud_down.py": 9,
}


def _group(item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    if mark:
        return mark.args[0] if mark.args else mark.kwargs.get("name")
    return "trained" if "trained" in getattr(item, "fixturenames", ()) else None


def _lane(item) -> int:
    """Longest first (a sort key: sorting is stable, so the unlisted keep their file order)."""
    name = item.path.name
    for key in (_group(item), f"{name}::{getattr(item, 'originalname', item.name)}", name):
        if key in WEIGHTS:
            return -WEIGHTS[key]
    return 0


@pytest.fixture(autouse=True)
def _marker_is_true(request, monkeypatch, _isolated):
    marks = {mark.name for mark in request.node.iter_markers()}
    names = set(request.fixturenames)
    if "ssh" in marks:
        yield
        return
    if "ray" in marks:
        home = Path(os.environ["ORCHESTRATE_HOME"])
        yield
        passed = _DURATIONS.get(request.node.nodeid, {}).get("outcome") == "passed"
        if passed and not names & RAY_FIXTURES and not (home / "local-ray").is_dir():
            pytest.fail("marked ray, but it used no Ray: mark it for the fast tier", pytrace=False)
        return
    from orchestrator.reach import embedded

    def refuse(*_args, **_kwargs):
        raise AssertionError("a test of the fast tier started the embedded Ray: mark it ray")

    monkeypatch.setattr(embedded, "start", refuse)
    before = of_this_session(STARTED)
    yield
    started = of_this_session(STARTED) - before
    if started:
        pytest.fail(f"a test of the fast tier left processes {sorted(started)} running (a Ray "
                    "or an sshd): mark it ray or ssh, and stop what it starts", pytrace=False)


_DURATIONS: dict[str, dict] = {}


def pytest_runtest_logreport(report) -> None:
    node = re.sub(r"@[\w-]+$", "", report.nodeid)   # the test, not its xdist group
    row = _DURATIONS.setdefault(node, {"seconds": 0.0, "outcome": "passed"})
    row["seconds"] += report.duration
    # when and where (the xdist worker): which tests ran beside which, and what a worker waited
    row["worker"] = getattr(report, "worker_id", None) or os.environ.get("PYTEST_XDIST_WORKER")
    row["start"] = min(row.get("start", report.start), report.start)
    row["stop"] = max(row.get("stop", report.stop), report.stop)
    if report.failed:
        row["outcome"] = "error" if report.when != "call" else "failed"
    elif report.skipped:
        row["outcome"] = "skipped"


def pytest_sessionfinish(session) -> None:
    target = os.environ.get("ORCHESTRATE_TEST_DURATIONS")
    if target and not hasattr(session.config, "workerinput"):   # xdist's controller only
        Path(target).write_text(json.dumps(_DURATIONS, indent=1))
