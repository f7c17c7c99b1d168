"""A run's admission sized from Ray's node table (issue 48): right after `up`, the autoscaler's
load report (`/api/cluster_status`, refreshed every AUTOSCALER_UPDATE_INTERVAL_S: 5 s) still
counts only the head, while the node table already lists every host. The dashboard is faked at
the wire (a loopback server answering as Ray 2.60 does, the shapes trimmed from real answers);
Ray's own job client and orchestrate's client talk to it over real HTTP. The same path on real
hosts with Ray's default interval: tests/cluster/test_cloud_aws.py (the simulated AWS's
instances run Ray with its own settings)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from orchestrator.clients.jobs import JobsClient
from orchestrator.errors import SpecError
from orchestrator.language.experiment import load_experiment
from orchestrator.reach.endpoint import Endpoint
from orchestrator.run import experiment, needs
from orchestrator.state import UP, ClusterRecord

HOSTS = ("10.9.0.11", "10.9.0.12", "10.9.0.13")


def node(ip: str, state: str = "ALIVE") -> dict:
    return {"node_id": ip.replace(".", "") * 5, "node_ip": ip, "is_head_node": ip == HOSTS[0],
            "state": state, "state_message": None, "node_name": ip,
            "resources_total": {"memory": 8e9, "CPU": 2.0, "object_store_memory": 2e9,
                                f"node:{ip}": 1.0,
                                **({"node:__internal_head__": 1.0} if ip == HOSTS[0] else {})}}


class JustUp:
    """A head's dashboard seconds after `up`: `alive` hosts in the node table, the load report
    still counting the head alone."""

    def __init__(self, alive: tuple[str, ...], reported: int = 1) -> None:
        self.alive, self.reported = alive, reported
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                body = json.dumps(fake.answer(self.path.split("?")[0])).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)

    def answer(self, path: str) -> dict:
        import ray

        if path == "/api/cluster_status" and not self.reported:   # no report yet
            return {"result": True, "msg": "", "data": {"clusterStatus": {}}}
        if path == "/api/cluster_status":   # the head alone, by default: 2 CPUs
            workers = {"ray.worker.default": self.reported - 1} if self.reported > 1 else {}
            return {"result": True, "msg": "", "data": {"clusterStatus": {
                "loadMetricsReport": {"usage": {"CPU": [0.0, 2.0 * self.reported],
                                                "memory": [0.0, 8e9 * self.reported]},
                                      "resourceDemand": [], "pgDemand": []},
                "autoscalerReport": {"activeNodes": {"ray.head.default": 1, **workers}}}}}
        if path == "/api/v0/nodes":
            listed = [node(ip) for ip in self.alive]
            return {"result": True, "msg": "",
                    "data": {"result": {"total": len(listed), "result": listed}}}
        return {"version": "4", "ray_version": ray.__version__, "ray_commit": ray.__commit__}

    def __enter__(self) -> JustUp:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def on_prem(state, name: str = "race") -> None:
    state.store.write_cluster(ClusterRecord(name=name, provider="local", file=f"/{name}.yaml",
                                            config_hash="h", state=UP, head_ip=HOSTS[0]))
    state.store.write_rendered(name, {"cluster_name": name, "provider": {
        "type": "local", "head_ip": HOSTS[0], "worker_ips": list(HOSTS[1:])}})


def spec_with(tmp_path: Path, workers: int):
    path = tmp_path / "exp.yaml"
    (tmp_path / "train.csv").write_text("x,target\n1,0\n")
    path.write_text("\n".join([
        "name: exp", "trainer: torch", "model: {name: mlp, hidden_dims: [8], num_classes: 2}",
        "datasets:", "  train: {format: csv, path: train.csv}", "label_column: target",
        "train_loop_config: {epochs: 1}", "scaling_config:", f"  num_workers: {workers}", ""]))
    return load_experiment(path, here=False)


def admit(fake: JustUp, state, tmp_path: Path, workers: int) -> tuple:
    said: list[str] = []
    spec = spec_with(tmp_path, workers)
    jobs = JobsClient(Endpoint(fake.address, None, "cluster race"))
    config = {"scaling_config": {"num_workers": workers, "use_gpu": False,
                                 "resources_per_worker": None}}
    return experiment.admit(spec, config, jobs, "race", state, said.append), said


def test_a_run_right_after_up_is_sized_by_every_alive_host(state, tmp_path):
    on_prem(state)
    with JustUp(HOSTS) as fake:
        admission, said = admit(fake, state, tmp_path, workers=2)
    # 3 CPUs of the 6 the three hosts have (the load report's 2 would refuse it)
    assert admission is not None and not admission.too_big and said == []
    assert admission.share == pytest.approx(0.9 * 3 / 6, abs=1e-4)


def test_a_run_bigger_than_every_host_is_refused_with_the_figure_and_its_source(state, tmp_path):
    on_prem(state)
    with JustUp(HOSTS) as fake, pytest.raises(SpecError) as refused:
        admit(fake, state, tmp_path, workers=6)
    [problem] = refused.value.problems
    assert problem.field == "scaling_config.num_workers" and problem.line == 9
    assert problem.message == (
        "the run asks for 7 CPUs (6 workers x 1 CPU + 1 CPU for Ray Data), but cluster race has "
        "6 CPUs in all (3 nodes alive in Ray's node table)")


def test_a_host_not_joined_yet_is_waited_for_not_counted_out(state, tmp_path):
    on_prem(state)
    with JustUp(HOSTS[:2]) as fake:
        admission, said = admit(fake, state, tmp_path, workers=4)
    assert admission is not None and admission.too_big == ["CPU"]
    assert said == [f"note: the run asks for 5 CPUs (4 workers x 1 CPU + 1 CPU for Ray Data), "
                    f"but cluster race has 4 CPUs in all (2 nodes alive in Ray's node table); "
                    f"{HOSTS[2]} has not joined: the run waits for it"]


def test_a_cloud_cluster_just_up_queues_its_runs_by_its_alive_nodes(state, tmp_path):
    """A cloud cluster seconds after `up`: no load report yet (before, such a run was not
    queued behind others); its autoscaler may add nodes, so a run bigger than the nodes up now
    is not refused here (Ray Train checks it against the node types' limits)."""
    state.store.write_cluster(ClusterRecord(name="race", provider="aws", file="/race.yaml",
                                            config_hash="h", state=UP, head_ip=HOSTS[0]))
    with JustUp(HOSTS[:1], reported=0) as fake:
        fits, said = admit(fake, state, tmp_path, workers=1)
        grows, said_too = admit(fake, state, tmp_path, workers=4)
    assert fits is not None and not fits.too_big and said == []
    assert fits.share == pytest.approx(0.9 * 2 / 2, abs=1e-4)
    assert grows is not None and grows.too_big == ["CPU"] and said_too == []


def test_the_node_table_is_read_over_http_as_ray_answers_it():
    with JustUp(HOSTS[:2]) as fake:
        nodes = JobsClient(Endpoint(fake.address, None, "cluster race")).nodes()
    assert nodes is not None
    found = needs.capacity_of(nodes, "cluster race")
    assert found is not None and found.text() == "4 CPUs" and found.node_ips == HOSTS[:2]


@pytest.mark.parametrize("reported", [1, 3])
def test_status_counts_node_types_only_from_a_report_that_covers_every_alive_node(reported):
    """`status` and `up` price the workers running per node type from the autoscaler's report:
    one that still counts the head alone would price a 3-host cluster as its head."""
    from orchestrator.cluster import health

    with JustUp(HOSTS, reported=reported) as fake:
        found = health.probe(Endpoint(fake.address, None, "cluster race"))
    assert (found.nodes_alive, found.resources["CPU"]) == (3, 6.0)
    assert found.node_types == ({} if reported == 1 else
                                {"ray.head.default": 1, "ray.worker.default": 2})
