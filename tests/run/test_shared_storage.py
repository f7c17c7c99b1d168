"""A run's storage on a cluster of several nodes (issue 52, fault 3): with no
`run_config.storage_path`, Ray Train writes each node's checkpoints to that node's own
`~/ray_results`, and a run whose workers span nodes fails in Ray a minute in
(`WorkerGroupError`). `run` refuses it before submitting anything, naming the fix; a cluster
file's `storage:` is the default storage of the experiments run on it."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator import cluster_settings
from orchestrator.cli import main
from orchestrator.errors import SpecError
from orchestrator.language.cluster import load_cluster
from orchestrator.language.experiment import load_experiment
from orchestrator.render.experiment import resolve_config
from orchestrator.state import UP, ClusterRecord

# head + 2 workers on fixed hosts
ON_PREM = """\
cluster_name: lab
provider: {type: local, head_ip: 10.0.0.1, worker_ips: [10.0.0.2, 10.0.0.3]}
auth: {ssh_user: root}
"""
ALONE = """\
cluster_name: alone
provider: {type: local, head_ip: 10.0.0.1, worker_ips: []}
auth: {ssh_user: root}
max_workers: 0
"""
EXPERIMENT = """\
name: e
trainer: torch
train_loop: loop:train
scaling_config: {num_workers: 2}
"""


def files(tmp_path: Path, cluster: str, experiment: str = EXPERIMENT) -> Path:
    (tmp_path / "loop.py").write_text("def train(config):\n    pass\n")
    (tmp_path / "c.yaml").write_text(textwrap.dedent(cluster))
    path = tmp_path / "e.yaml"
    path.write_text(experiment + "cluster: c.yaml\n")
    return path


def test_a_run_on_several_nodes_with_rays_default_storage_is_refused_before_submitting(
        tmp_path, state, capsys, monkeypatch):
    path = files(tmp_path, ON_PREM, EXPERIMENT + "run_config:\n  name: first\n")
    state.store.write_cluster(ClusterRecord(name="lab", provider="local",
                                            file=str(tmp_path / "c.yaml"), config_hash="h",
                                            state=UP, head_ip="10.0.0.1"))
    reached: list[str] = []

    def target(*args, **kwargs):   # where the job would be submitted: never reached
        reached.append("target")
        raise AssertionError("the run reached its cluster")

    monkeypatch.setattr("orchestrator.run.experiment.target", target)
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert reached == [] and state.store.jobs() == []
    assert f"{path}:5: run_config" in err, err
    assert "cluster lab can have 3 nodes" in err and "~/ray_results" in err
    assert "set run_config.storage_path: s3://... in the experiment" in err
    assert "or storage: s3://... in the cluster file" in err and "Traceback" not in err


def test_without_run_config_the_refusal_points_at_the_cluster_line(tmp_path, capsys):
    path = files(tmp_path, ON_PREM)
    with pytest.raises(SpecError) as refused:
        load_experiment(path, here=False)
    [problem] = refused.value.problems
    assert (problem.file, problem.line, problem.field) == (str(path), 5, "cluster")
    assert main(["validate", str(path)]) == 1
    said = capsys.readouterr()
    assert f"{path}:5: cluster" in said.out + said.err


def test_the_cluster_files_storage_is_the_runs_storage_path(tmp_path):
    path = files(tmp_path, ON_PREM + "storage: s3://team-results/ray\n")
    spec = load_experiment(path, here=False)
    assert spec.cluster is not None
    assert cluster_settings.storage(spec.cluster.document) == "s3://team-results/ray"
    assert "storage" not in spec.cluster.document
    # as is: Ray Train puts each run under <storage_path>/<run name>
    assert resolve_config(spec)["run_config"]["storage_path"] == "s3://team-results/ray"


def test_the_experiments_own_storage_path_wins_over_the_clusters(tmp_path):
    path = files(tmp_path, ON_PREM + "storage: s3://team-results/ray\n",
                 EXPERIMENT + "run_config: {storage_path: gs://mine/runs}\n")
    assert resolve_config(load_experiment(path, here=False))["run_config"]["storage_path"] == \
        "gs://mine/runs"


def test_an_explicit_local_storage_path_is_the_users_promise_of_a_shared_folder(tmp_path):
    path = files(tmp_path, ON_PREM, EXPERIMENT + "run_config: {storage_path: /mnt/nfs/runs}\n")
    assert resolve_config(load_experiment(path, here=False))["run_config"]["storage_path"] == \
        "/mnt/nfs/runs"


def test_a_single_node_cluster_and_the_embedded_ray_keep_rays_default(tmp_path):
    alone = load_experiment(files(tmp_path, ALONE), here=False)
    assert alone.cluster is not None and alone.cluster.name == "alone"
    assert resolve_config(alone)["run_config"]["storage_path"] is None
    (tmp_path / "embedded.yaml").write_text(EXPERIMENT)
    embedded = load_experiment(tmp_path / "embedded.yaml", here=False)
    assert resolve_config(embedded)["run_config"]["storage_path"] is None


@pytest.mark.parametrize("cluster, nodes", [
    # Ray's default node types on AWS: a worker type with max_workers 2
    ("cluster_name: c\nprovider: {type: aws, region: us-west-2}\n", 3),
    # the head's own type may add workers
    ("cluster_name: c\nprovider: {type: aws, region: us-west-2}\nmax_workers: 4\n"
     "available_node_types:\n  h: {node_config: {InstanceType: m5.large}, resources: {},"
     " max_workers: 1}\nhead_node_type: h\n", 2),
    # capped by the cluster's max_workers
    ("cluster_name: c\nprovider: {type: aws, region: us-west-2}\nmax_workers: 3\n"
     "head: {instance_type: m5.large}\nworkers:\n  a: {instance_type: m5.large, max_workers: 8}\n", 4),
    # KubeRay worker groups
    ("cluster_name: c\nprovider: {type: kuberay, namespace: ml, image: rayproject/ray:2.60.0}\n"
     "head: {cpus: 2, memory: 8Gi}\nworkers:\n  cpu: {cpus: 4, memory: 16Gi, min_workers: 1,"
     " max_workers: 4}\n", 5),
])
def test_the_nodes_a_cluster_can_have_are_counted_from_its_limits(tmp_path, cluster, nodes):
    from orchestrator import providers

    (tmp_path / "c.yaml").write_text(cluster)
    assert providers.most_nodes(load_cluster(tmp_path / "c.yaml", here=False).document) == nodes


@pytest.mark.parametrize("cluster", [
    "cluster_name: c\nprovider: {type: aws, region: us-west-2}\nmax_workers: 0\n",
    "cluster_name: c\nprovider: {type: kuberay, namespace: ml, image: rayproject/ray:2.60.0}\n"
    "head: {cpus: 2, memory: 8Gi}\n",
    ALONE,
])
def test_a_cluster_that_cannot_grow_is_one_node(tmp_path, cluster):
    from orchestrator import providers

    (tmp_path / "c.yaml").write_text(cluster)
    assert providers.most_nodes(load_cluster(tmp_path / "c.yaml", here=False).document) == 1


@pytest.mark.parametrize("value, line_words", [
    ("s3://AKIAX:hunter2@team-results/ray", "credentials"),
    ("relative/folder", "s3://bucket/prefix, gs://, abfss://"),
    ("hdfs://namenode/x", "s3://bucket/prefix, gs://, abfss://"),
])
def test_a_storage_that_cannot_be_shared_safely_is_refused_at_its_line(tmp_path, capsys, value,
                                                                      line_words):
    (tmp_path / "c.yaml").write_text(ON_PREM + f"storage: {value}\n")
    with pytest.raises(SpecError) as refused:
        load_cluster(tmp_path / "c.yaml", here=False)
    [problem] = [p for p in refused.value.problems if p.field == "storage"]
    assert problem.line == 4 and line_words in problem.message, problem
    assert main(["validate", str(tmp_path / "c.yaml")]) == 1
    said = capsys.readouterr()
    assert "c.yaml:4: storage" in said.out + said.err and "hunter2" not in said.out + said.err


@pytest.mark.parametrize("value", ["s3://team-results/ray", "gs://b/x", "abfss://c@acct.dfs.core.windows.net/x",
                                   "/mnt/nfs/ray-results", "s3://anonymous@public-bucket/x"])
def test_shared_storage_of_every_kind_ray_writes_to(tmp_path, value):
    (tmp_path / "c.yaml").write_text(ON_PREM + f"storage: {value}\n")
    assert cluster_settings.storage(load_cluster(tmp_path / "c.yaml", here=False).document) == value


def test_render_and_runs_show_the_storage_the_run_was_given(tmp_path, state, capsys, monkeypatch):
    """`render` shows the job's storage_path as resolved; `runs` shows the run's folder under it
    from submission on (before the run has written a summary)."""
    from orchestrator.render.experiment import render_job, ship
    from orchestrator.results import runs
    from orchestrator.run import experiment

    path = files(tmp_path, ON_PREM + "storage: s3://team-results/ray/\n",
                 EXPERIMENT + "run_config: {name: first}\n")
    assert main(["render", str(path)]) == 0
    assert "storage_path: s3://team-results/ray/" in capsys.readouterr().out

    spec = load_experiment(path, here=False)
    submitted: list[dict] = []

    class Jobs:   # the cluster's job API, as far as `submit` goes
        def submit(self, **job) -> bool:
            submitted.append(job)
            return True

    monkeypatch.setattr(experiment, "admit", lambda *args, **kwargs: None)
    done = experiment.submit(render_job(spec, ship(spec)), spec, Jobs(), state, "lab",
                             experiment.RunOptions())
    assert submitted and done.plan.config["run_config"]["storage_path"] == "s3://team-results/ray/"
    [row] = runs.recorded(state)
    assert row["run_folder"] == "s3://team-results/ray/first" and row["storage"] is None
