"""What a run asks of its Ray and its share of Ray's job queue (`run.needs`): pure, no Ray."""
from __future__ import annotations

import pytest

from orchestrator.run import needs
from orchestrator.util import nodes


def config(scaling: dict, tune: dict | None = None) -> dict:
    found: dict = {"scaling_config": {"num_workers": 1, "use_gpu": False,
                                      "resources_per_worker": None, **scaling}}
    if tune is not None:
        found["tune"] = tune
    return found


def capacity(**total: float) -> needs.Capacity:
    return needs.Capacity(dict(total), "the embedded Ray", ("10.0.0.1",))


def test_a_run_reserves_its_workers_and_one_cpu_for_ray_data():
    asked = needs.of(config({"num_workers": 2}))
    assert asked.one == {"CPU": 3.0}
    assert asked.text() == "3 CPUs (2 workers x 1 CPU + 1 CPU for Ray Data)"


def test_gpu_workers_and_given_resources_are_read_as_ray_train_reads_them():
    assert needs.of(config({"num_workers": 4, "use_gpu": True})).one == {"GPU": 4.0, "CPU": 1.0}
    given = needs.of(config({"num_workers": 3, "resources_per_worker": {"CPU": 2, "GPU": 0}}))
    assert given.one == {"CPU": 7.0}


def test_runs_that_fit_together_share_the_head_and_one_more_does_not():
    one = needs.admit(needs.of(config({})), capacity(CPU=4.0))
    assert not one.too_big
    assert 2 * one.share <= needs.HEAD_SHARE < 3 * one.share
    assert one.entrypoint_resources == {needs.HEAD: one.share}
    assert one.metadata[needs.NEEDS_KEY] == "2 CPUs (1 worker x 1 CPU + 1 CPU for Ray Data)"


def test_exact_fits_are_not_lost_to_rounding():
    third = needs.admit(needs.of(config({"num_workers": 1})), capacity(CPU=6.0))
    assert 3 * third.share <= needs.HEAD_SHARE


def test_a_run_bigger_than_the_ray_is_named_with_what_it_asks():
    big = needs.admit(needs.of(config({"num_workers": 64})), capacity(CPU=4.0))
    assert big.too_big == ["CPU"]
    assert big.share <= needs.HEAD_SHARE
    text = needs.refusal(big, capacity(CPU=4.0, memory=1e9, **{"node:1.2.3.4": 1.0}))
    assert text == ("the run asks for 65 CPUs (64 workers x 1 CPU + 1 CPU for Ray Data), but "
                    "the embedded Ray has 4 CPUs in all (1 node alive in Ray's node table)")


def test_gpus_on_a_ray_without_any_are_too_big():
    assert needs.admit(needs.of(config({"use_gpu": True})), capacity(CPU=4.0)).too_big == ["GPU"]


@pytest.mark.parametrize("space, samples, count", [
    ({"train_loop_config": {"lr": {"grid_search": [1, 2, 3]}}}, 1, 3),
    ({"a": {"grid_search": [1, 2]}, "b": {"grid_search": [1, 2, 3]}}, 2, 12),
    ({"params": {"max_depth": {"randint": [1, 9]}}}, 4, 4),
    ({}, -1, None),
])
def test_a_sweeps_trials_are_counted(space, samples, count):
    assert needs.count_trials(space, samples) == count


def test_a_sweep_reserves_the_trials_it_runs_at_once():
    sweep = needs.of(config({"num_workers": 1}, {"param_space": {"lr": {"grid_search": [1, 2, 3]}},
                                                 "tune_config": {"num_samples": 1}}))
    admitted = needs.admit(sweep, capacity(CPU=4.0))
    assert admitted.at_once == 2 and admitted.env_vars == {"ORCHESTRATE_TRIALS_AT_ONCE": "2"}
    assert admitted.asked.startswith("4 CPUs (2 trials at once, each 1 worker")
    capped = needs.of(config({}, {"param_space": {"lr": {"grid_search": [1, 2, 3]}},
                                  "tune_config": {"max_concurrent_trials": 1}}))
    assert needs.admit(capped, capacity(CPU=8.0)).at_once == 1


def test_the_embedded_ray_is_sized_for_the_run_up_to_a_limit():
    assert needs.embedded_cpus(needs.of(config({"num_workers": 2})), cores=2) == 4
    assert needs.embedded_cpus(needs.of(config({"num_workers": 5})), cores=2) == 6
    assert needs.embedded_cpus(needs.of(config({"num_workers": 64})), cores=2) == 8


def node(ip: str, state: str = "ALIVE", **resources: float) -> dict:
    """A node as Ray 2.60's node table (`/api/v0/nodes`) lists it (trimmed from a real one)."""
    return {"node_id": ip.replace(".", "") * 4, "node_ip": ip, "is_head_node": ip.endswith(".1"),
            "state": state, "resources_total": {"memory": 8e9, "object_store_memory": 2e9,
                                                f"node:{ip}": 1.0, **resources}}


def test_capacity_is_every_alive_node_of_rays_node_table():
    answer = {"result": True, "msg": "", "data": {"result": {"total": 4, "result": [
        node("10.0.0.1", CPU=2.0, **{"node:__internal_head__": 1.0}),
        node("10.0.0.2", CPU=2.0, GPU=1.0), node("10.0.0.3", CPU=2.0, **{"accelerator_type:T4": 1.0}),
        node("10.0.0.4", "DEAD", CPU=8.0)]}}}
    found = needs.capacity_of(nodes.listed(answer) or [], "cluster race")
    assert found is not None
    assert found.text() == "6 CPUs, 1 GPU, 1 accelerator_type:T4"
    assert found.node_ips == ("10.0.0.1", "10.0.0.2", "10.0.0.3")
    assert found.source() == "3 nodes alive in Ray's node table"
    assert needs.capacity_of([node("10.0.0.1", "DEAD", CPU=2.0)], "x") is None
    assert nodes.listed({"data": {}}) is None and nodes.listed("nope") is None


class _Jobs:
    """What `stalled` asks of the jobs client: a status, and Ray's cluster status as Ray 2.60
    shapes it (resource demands and pending placement groups as (dict, count) pairs)."""

    endpoint = type("Endpoint", (), {"label": "the embedded Ray"})()

    def __init__(self, status: str, demand: bool, reported_cpus: float = 4.0) -> None:
        self.job_status = status
        report = {"usage": {"CPU": [reported_cpus, reported_cpus]}, "resourceDemand": [],
                  "pgDemand": []}
        if demand:
            report["pgDemand"] = [[{"bundles": [[{"CPU": 1.0}, 2]], "strategy": "PACK"}, 1]]
            report["resourceDemand"] = [[{"CPU": 1.0}, 3]]
        self.found = {"data": {"clusterStatus": {"loadMetricsReport": report}}}

    def status(self, job_id: str) -> str:
        return self.job_status

    def cluster_status(self) -> dict:
        return self.found

    def nodes(self) -> list[dict]:
        return [node("10.0.0.1", CPU=4.0)]


def test_a_stuck_run_is_reported_with_what_it_waits_for():
    from orchestrator.run.experiment import stalled

    said: list[str] = []
    admission = needs.admit(needs.of(config({})), capacity(CPU=4.0))
    stalled(_Jobs("PENDING", demand=False), "j", admission, 125.0, said.append)
    assert said == ["still queued after 2:05: it waits for 2 CPUs (1 worker x 1 CPU + 1 CPU "
                    "for Ray Data); 4 of 4 CPUs in use"]
    said.clear()
    stalled(_Jobs("RUNNING", demand=True), "j", admission, 240.0, said.append)
    assert said == ["no output for 4:00; Ray cannot place what was asked of it yet: 3 x "
                    "{CPU: 1} (tasks or actors); 1 placement group of 2 x {CPU: 1} (4 of 4 CPUs "
                    "in use)"]
    said.clear()
    stalled(_Jobs("RUNNING", demand=False), "j", admission, 240.0, said.append)
    assert said == []   # slow, not stuck: nothing waits for resources
    # the autoscaler's report not yet counting every alive node: its use is not shown
    stalled(_Jobs("PENDING", demand=False, reported_cpus=2.0), "j", admission, 125.0, said.append)
    assert said == ["still queued after 2:05: it waits for 2 CPUs (1 worker x 1 CPU + 1 CPU "
                    "for Ray Data)"]


class _Listed:
    """A job as Ray's job list gives it: submission id, status, start time, metadata."""

    def __init__(self, job_id: str, status: str, start: int, share: float) -> None:
        self.submission_id, self.status, self.start_time = job_id, status, start
        self.metadata = {needs.SHARE_KEY: str(share)}


class _Queue:
    def __init__(self, listed: list[_Listed]) -> None:
        self.listed = listed
        self.endpoint = type("Endpoint", (), {"label": "the embedded Ray"})()

    def status(self, job_id: str) -> str:
        return next(str(j.status) for j in self.listed if j.submission_id == job_id)

    def list(self) -> list[_Listed]:
        return self.listed


def test_a_run_submitted_behind_others_says_it_is_queued_even_before_they_start():
    from orchestrator.run.experiment import queued

    admission = needs.admit(needs.of(config({})), capacity(CPU=4.0))
    share = admission.share
    said: list[str] = []
    # ten submitted together: the two before it still set up their environments (PENDING)
    ahead = [_Listed(f"a{i}", "PENDING", i, share) for i in range(2)]
    queued(_Queue([*ahead, _Listed("me", "PENDING", 5, share)]), "me", admission, said.append)
    assert said == ["queued: the run waits for 2 CPUs (1 worker x 1 CPU + 1 CPU for Ray Data); "
                    "0 run(s) hold the embedded Ray's resources now, 2 wait ahead of it"]
    said.clear()
    # the first of them: nothing ahead, it fits
    queued(_Queue([_Listed("me", "PENDING", 0, share), *ahead[1:]]), "me", admission,
           said.append)
    assert said == []


