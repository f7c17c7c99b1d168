"""Prices in plans and the project's budget: real project files (an AWS cluster in orchestrate's
shorthand), planned without refresh; the figures are checked against the shipped catalog's own
lookups, so a wrong sum, a wrong count of workers or a lost spot flag fails. The apply test
refuses before any change, so no cloud is asked."""
from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from orchestrator.gitops import report
from orchestrator.gitops.live import Live
from orchestrator.gitops.planner import plan_project
from orchestrator.language.project import load_project
from orchestrator.language.schema import load_schema
from orchestrator.providers.prices import lookup
from orchestrator.state.document import StateDoc

from .test_planner import Project
from .test_planner import applied as applied_local

REGION = "us-west-2"


def aws(name: str, workers: int = 4, instance: str = "g5.xlarge", spot: bool = False) -> dict:
    return {"cluster_name": name, "provider": {"type": "aws", "region": REGION},
            "auth": {"ssh_user": "ubuntu"},
            "head": {"instance_type": "m5.2xlarge", "image": "ami-0a2363a9cff180a64"},
            "workers": {"gpu": {"instance_type": instance, "image": "ami-0a2363a9cff180a64",
                                "min_workers": 1, "max_workers": workers, "spot": spot}},
            "storage": "s3://p-results/runs"}   # several nodes: their runs' shared storage


def price(instance: str, spot: bool = False) -> float:
    found = lookup("aws", instance, REGION, spot=spot)
    assert found is not None, f"{instance} is in the shipped catalog"
    return found


@pytest.fixture
def project(tmp_path, monkeypatch) -> Project:
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    project = Project(tmp_path / "repo")
    project.write("clusters", "gpu", aws("gpu"))
    return project


def applied(project: Project) -> StateDoc:
    """The state after an apply of the project's files as they are now."""
    doc = applied_local(project)
    for entry in doc.resources.values():
        if entry["kind"] == "cluster":
            entry["provider"] = "aws"
    return doc


def budget(project: Project, **caps: float) -> None:
    path = project.root / "orchestrate.yaml"
    document = yaml.safe_load(path.read_text())
    document["budget"] = caps
    path.write_text(yaml.safe_dump(document))


def planned(project: Project, doc: StateDoc | None = None):
    spec = load_project(project.root / "orchestrate.yaml")
    return plan_project(project.desired(), doc or StateDoc("p"), Live(False),
                        budget=spec.budget)


def test_a_new_cluster_is_priced_at_min_and_max_workers_in_every_format(project):
    plan = planned(project)
    head, worker = price("m5.2xlarge"), price("g5.xlarge")
    [change] = plan.changes
    assert change.price["before"] is None
    assert change.price["after"]["at_min"] == pytest.approx(head + worker, abs=1e-3)
    assert change.price["after"]["at_max"] == pytest.approx(head + 4 * worker, abs=1e-3)
    assert plan.cost.after == pytest.approx(head + 4 * worker, abs=1e-3)
    assert plan.cost.change == pytest.approx(head + 4 * worker, abs=1e-3)

    document = report.as_json(plan, None)
    jsonschema.validate(document, load_schema("plan"))
    assert document["cost"]["after_at_max"] == pytest.approx(head + 4 * worker, abs=1e-3)
    assert document["cost"]["source"] and document["cost"]["currency"] == "USD"
    assert document["changes"][0]["price"] == change.price

    text = report.text(plan)
    assert f"${head + worker:,.2f}/h to ${head + 4 * worker:,.2f}/h" in text
    assert f"Cost at max_workers: $0.00/h -> ${head + 4 * worker:,.2f}/h" in text
    assert document["cost"]["source"] in text
    markdown = report.markdown(plan, None)
    assert "| `cluster/gpu` | none |" in markdown and "**total at max_workers**" in markdown

    # a saved plan shows the same cost
    again = report.from_json(json.loads(json.dumps(document)))
    assert report.text(again) == text


def test_a_change_shows_before_after_and_spot_prices(project):
    doc = applied(project)
    project.write("clusters", "gpu", aws("gpu", workers=8, spot=True))
    [change] = planned(project, doc).actions
    head = price("m5.2xlarge")
    assert change.price["before"]["at_max"] == pytest.approx(head + 4 * price("g5.xlarge"),
                                                             abs=1e-3)
    assert change.price["after"]["at_max"] == pytest.approx(
        head + 8 * price("g5.xlarge", spot=True), abs=1e-3)
    assert "->" in report.price_line(change)


def test_an_instance_the_catalog_lacks_is_unknown_with_a_warning_never_a_guess(project):
    project.write("clusters", "gpu", aws("gpu", instance="g5.xlarge-not-real"))
    plan = planned(project)
    [change] = plan.changes
    assert change.price["after"]["at_max"] is None and plan.cost.after is None
    assert any("g5.xlarge-not-real" in w for w in change.price["warnings"])
    assert "unknown" in report.text(plan)


def test_a_plan_over_budget_is_marked_and_apply_refuses_it_naming_the_amounts(project):
    head, worker = price("m5.2xlarge"), price("g5.xlarge")
    at_max = head + 4 * worker
    budget(project, max_cluster_hourly=round(at_max / 2, 2), max_hourly=1000)
    plan = planned(project)
    assert len(plan.cost.over) == 1
    assert f"cluster/gpu costs ${at_max:,.2f}/h at max_workers" in plan.cost.over[0]
    assert "Over budget" in report.text(plan)
    assert "Over budget" in report.markdown(plan, None)
    jsonschema.validate(report.as_json(plan, None), load_schema("plan"))

    from .test_commands import cli  # the CLI, run for real
    done = cli(project, "apply", "-y")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "over the project's budget" in done.stderr and "cluster/gpu" in done.stderr
    assert f"${at_max:,.2f}/h" in done.stderr and "--allow-over-budget" in done.stderr
    assert "nothing was changed" in done.stderr


def inflated(doc: StateDoc, name: str, max_workers: int, instance: str) -> StateDoc:
    """`doc` as a state writer may leave it: the cluster recorded with more and bigger workers
    than it was given."""
    config = doc.resources[f"cluster/{name}"]["config"]
    for node_type in config["available_node_types"].values():
        if node_type.get("max_workers"):
            node_type["max_workers"] = max_workers
            node_type["node_config"]["InstanceType"] = instance
    config["max_workers"] = max_workers
    return doc


def test_a_state_recording_a_dearer_before_does_not_pass_an_over_budget_change(project):
    """Whoever writes the state can record a cluster as bigger than it is: the change the
    repository then asks for looks like a saving. The budget judges what the file asks for."""
    doc = inflated(applied(project), "gpu", max_workers=40, instance="g5.12xlarge")
    head, worker = price("m5.2xlarge"), price("g5.xlarge")
    budget(project, max_cluster_hourly=round(head + 8 * worker, 2), max_hourly=1000)
    project.write("clusters", "gpu", aws("gpu", workers=16))   # at max: over the cap
    plan = planned(project, doc)
    [change] = plan.actions
    assert change.price["before"]["at_max"] == pytest.approx(head + 40 * price("g5.12xlarge"),
                                                             abs=1e-3)   # the state's claim
    assert plan.cost.change < 0   # as the state tells it, a saving
    assert len(plan.cost.over) == 1, plan.cost.over
    assert f"cluster/gpu costs ${head + 16 * worker:,.2f}/h at max_workers" in plan.cost.over[0]
    assert "the state records it at" in plan.cost.over[0]
    text = report.text(plan)
    assert "Over budget" in text and "before: as the state records it" in text
    assert "before: as the state records it" in report.markdown(plan, None)
    jsonschema.validate(report.as_json(plan, None), load_schema("plan"))

    from orchestrator.gitops.store import ProjectState
    from orchestrator.state import State

    from .test_commands import cli  # the CLI, run for real
    ps = ProjectState.open(load_project(project.root / "orchestrate.yaml"), State.here())
    ps.read()
    ps.write(doc)
    done = cli(project, "apply", "-y", "--allow-destructive")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "over the project's budget" in done.stderr and "cluster/gpu" in done.stderr
    assert "nothing was changed" in done.stderr and "--allow-over-budget" in done.stderr


def test_a_change_is_judged_by_what_it_asks_for_even_when_it_lowers_the_cost(project):
    """The state cannot show that a change lowers the cost, so a cluster changed is judged by
    its file under a budget already broken; deleting it is never refused."""
    doc = applied(project)
    budget(project, max_hourly=0.5)
    project.write("clusters", "gpu", aws("gpu", workers=2))
    plan = planned(project, doc)
    assert plan.cost.change < 0
    assert any("over the budget's max_hourly of $0.50/h" in why for why in plan.cost.over)
    budget(project, max_hourly=0.5 + price("m5.2xlarge") + 2 * price("g5.xlarge"))
    assert planned(project, doc).cost.over == ()   # within the cap: passes
    budget(project, max_hourly=0.5)
    project.write("clusters", "gpu", aws("gpu"))   # as applied: nothing launched, not judged
    plan = planned(project, doc)
    assert not plan.actions and plan.cost.over == ()
    assert "Within budget" in report.text(plan)


def test_a_partial_plan_counts_the_clusters_it_leaves_alone(project):
    project.write("clusters", "cpu", aws("cpu", workers=2))
    doc = applied(project)
    project.write("clusters", "gpu", aws("gpu", workers=6))
    spec = load_project(project.root / "orchestrate.yaml")
    files = [project.root / "clusters" / "gpu.yaml"]
    plan = plan_project(project.desired(files), doc, Live(False), partial=True,
                        budget=spec.budget)
    assert [c.address for c in plan.changes] == ["cluster/gpu"]
    cpu = doc.resources["cluster/cpu"]["config"]
    assert plan.cost.of("cluster/cpu").before == plan.cost.of("cluster/cpu").after
    assert plan.cost.change == pytest.approx(2 * price("g5.xlarge"), abs=1e-3)
    assert cpu   # the unplanned cluster's recorded config is what priced it


def test_the_budget_is_checked_by_the_project_schema(project):
    budget(project, max_hourly=-1)
    from orchestrator.errors import SpecError

    with pytest.raises(SpecError) as raised:
        load_project(project.root / "orchestrate.yaml")
    assert "budget.max_hourly" in str(raised.value.problems[0].field) or \
        "budget" in str(raised.value)


def test_an_unknown_price_elsewhere_does_not_let_a_new_cluster_past_max_hourly(project):
    project.write("clusters", "old", aws("old", instance="g9.unknown"))
    doc = applied(project)
    budget(project, max_hourly=1)
    project.write("clusters", "big", aws("big", workers=8))
    plan = planned(project, doc)
    assert any("total is unknown" in why and "cluster/old" in why for why in plan.cost.over), \
        plan.cost.over


def test_deleting_or_keeping_an_unknown_cluster_is_not_judged_by_the_budget(project):
    project.write("clusters", "old", aws("old", instance="g9.unknown"))
    doc = applied(project)
    budget(project, max_hourly=1, max_cluster_hourly=1)   # broken already by cluster/gpu
    (project.root / "clusters" / "old.yaml").unlink()
    plan = planned(project, doc)
    assert [c.action for c in plan.actions] == ["delete"]
    assert plan.cost.over == ()


def test_a_cluster_of_unknown_price_changed_cannot_pass_the_budget(project):
    """An unknown price cannot be checked: a cluster changed, grown or not, is over (the state
    cannot show that its node types are as they were); left as it is, it is not judged."""
    unknown = {**aws("gpu"), "provider": {"type": "aws", "region": "eu-central-1"}}
    project.write("clusters", "gpu", unknown)
    doc = applied(project)
    budget(project, max_cluster_hourly=100, max_hourly=100)
    assert planned(project, doc).cost.over == ()
    project.write("clusters", "gpu", {**unknown, "setup_commands": ["echo setup"]})
    plan = planned(project, doc)
    [change] = plan.actions
    assert change.price["before"]["at_max"] is None and change.price["after"]["at_max"] is None
    assert any("cluster/gpu: its price is unknown" in why for why in plan.cost.over), \
        plan.cost.over
    grown = {**unknown, "workers": {"gpu": {**unknown["workers"]["gpu"], "max_workers": 200,
                                            "instance_type": "p4d.24xlarge"}}}
    project.write("clusters", "gpu", grown)
    plan = planned(project, doc)
    assert any("cluster/gpu: its price is unknown" in why for why in plan.cost.over), \
        plan.cost.over


def test_a_sweep_with_a_time_budget_on_a_cluster_is_given_its_estimated_cost(project):
    from .test_planner import experiment

    sweep = experiment("sweep", "../clusters/gpu.yaml")
    sweep["tune"] = {"param_space": {"train_loop_config": {"lr": {"grid_search": [0.1, 0.01]}}},
                     "tune_config": {"time_budget_s": 5400}}
    project.write("experiments", "sweep", sweep)
    project.write("experiments", "plain", experiment("plain", "../clusters/gpu.yaml"))
    plan = planned(project)
    by = {c.address: c for c in plan.changes}
    at_max = price("m5.2xlarge") + 4 * price("g5.xlarge")
    found = by["experiment/sweep"].estimate
    assert found["at_most"] == pytest.approx(at_max * 1.5, abs=1e-3)
    assert found["hours"] == 1.5 and found["cluster"] == "cluster/gpu"
    assert by["experiment/plain"].estimate is None          # no time limit: no estimate
    assert f"estimated cost: at most ${at_max * 1.5:,.2f} (cluster/gpu at max_workers for " \
           f"1.5 h, its tune.tune_config.time_budget_s)" in report.text(plan)
    document = report.as_json(plan, None)
    jsonschema.validate(document, load_schema("plan"))
    assert "**Estimated cost of runs**" in report.markdown(plan, None)
