"""Renderers against golden files, and rendered clusters against Ray's own config checks.

Golden files live in tests/render/golden/, one per example file; a behaviour change shows as a
diff of a golden file. Regenerate after an intended change with:
    UPDATE_GOLDEN=1 python -m pytest tests/render/test_render.py
"""
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from orchestrator import contract
from orchestrator.cli import main

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
EXAMPLES = sorted(REPO.glob("cluster_configs/*.yaml")) + sorted(REPO.glob("experiments/*.yaml"))
# Those launched with `ray up`; a KubeRay cluster renders to a RayCluster
# (tests/launch/test_kuberay_manifests.py).
CLUSTERS = [p for p in sorted(REPO.glob("cluster_configs/*.yaml"))
            if yaml.safe_load(p.read_text())["provider"]["type"] != "kuberay"]
FAKE_HOME = "/ORCHESTRATE_HOME"


def render(path: Path, capsys, fmt: str = "text") -> str:
    assert main(["render", str(path), "--format", fmt]) == 0
    out, err = capsys.readouterr()
    return out


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_render_matches_golden(example, capsys, monkeypatch):
    monkeypatch.setenv("ORCHESTRATE_HOME", FAKE_HOME)
    out = render(example, capsys).replace(str(REPO), "<repo>")
    # a RayJob names orchestrate's package by its digest, which any change to the code changes
    out = re.sub(r"orchestrate-[0-9a-f]{24}\.zip", "orchestrate-<digest>.zip", out)
    golden = GOLDEN / f"{example.parent.name}__{example.name}"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(out)
    assert golden.exists(), f"no golden file {golden}; run with UPDATE_GOLDEN=1"
    assert out == golden.read_text()


def test_every_golden_file_has_an_example():
    expected = {f"{p.parent.name}__{p.name}" for p in EXAMPLES}
    assert {p.name for p in GOLDEN.iterdir()} == expected


@pytest.mark.parametrize("cluster", CLUSTERS, ids=lambda p: p.name)
def test_rendered_cluster_passes_rays_own_checks(cluster, capsys):
    pytest.importorskip("ray")
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = json.loads(render(cluster, capsys, "json"))
    validate_config(prepare_config(config))  # raises on anything Ray would refuse
    assert config["cluster_name"] == yaml.safe_load(cluster.read_text())["cluster_name"]


def config_name(cluster) -> str:
    return yaml.safe_load(cluster.read_text())["cluster_name"]


@pytest.mark.parametrize("cluster", CLUSTERS, ids=lambda p: p.name)
def test_rendered_cluster_runs_with_token_auth_and_no_secret(cluster, capsys):
    from orchestrator.state import State, cluster_key

    token_path = State.here().secrets.path(cluster_key(config_name(cluster)))
    config = yaml.safe_load(render(cluster, capsys))
    starts = [c for c in config["head_start_ray_commands"] + config["worker_start_ray_commands"]
              if "ray start" in c]
    assert len(starts) >= 2  # the head's and the workers': none may escape the check below
    assert all("RAY_AUTH_MODE=token" in c and "--disable-usage-stats" in c for c in starts)
    name = config["cluster_name"]
    assert token_path.name == name
    assert config["file_mounts"]["~/.ray/auth_token"] == str(token_path)
    assert not token_path.exists()  # rendering never creates or reads the token


@pytest.mark.parametrize("example, cluster", [
    ("cluster_configs/aws-gpu.yaml", "cluster_configs/aws-gpu.yaml"),
    ("cluster_configs/kuberay.yaml", "cluster_configs/kuberay.yaml"),        # a RayCluster
    ("experiments/quickstart-kuberay.yaml", "cluster_configs/kuberay.yaml"),  # a RayJob
])
def test_render_never_shows_an_existing_token(example, cluster, capsys):
    from orchestrator.state import State, cluster_key

    token = State.here().secrets.ensure(cluster_key(config_name(REPO / cluster))).read_text()
    for fmt in ("text", "json"):
        assert token not in render(REPO / example, capsys, fmt)


def test_cloud_dashboard_binds_to_loopback(capsys):
    config = yaml.safe_load(render(REPO / "cluster_configs/aws-gpu.yaml", capsys))
    (head,) = [c for c in config["head_start_ray_commands"] if "ray start" in c]
    assert "--dashboard-host=127.0.0.1" in head and "0.0.0.0" not in head


def test_render_experiment_shows_the_job(capsys):
    plan = json.loads(render(REPO / "experiments/quickstart.yaml", capsys, "json"))
    assert plan["entrypoint"] == contract.ENTRYPOINT
    assert plan["runtime_env"]["working_dir"] == str(REPO / "experiments")
    assert plan["config"]["datasets"]["train"]["path"] == "data/breast_cancer_train.csv"
    assert plan["config"]["scaling_config"]["num_workers"] == 2
    assert plan["submission_id"].startswith("orchestrate-quickstart-")


def test_run_parameters_name_the_datasets_as_the_file_gives_them(tmp_path, monkeypatch):
    """The job reads its data where it can (relative to its working_dir, or absolute outside
    it, made absolute again in the job's copy of the working_dir); its parameters name the
    paths as written, the same in every run."""
    from orchestrator.language.experiment import load_experiment
    from orchestrator.render.experiment import resolve_config
    from orchestrator.workload import data, tracking

    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "t.csv").write_text("a,target\n1,0\n")
    (tmp_path / "exp" / "data").mkdir(parents=True)
    (tmp_path / "exp" / "data" / "v.csv").write_text("a,target\n1,0\n")
    path = tmp_path / "exp" / "e.yaml"
    path.write_text(yaml.safe_dump({
        "name": "e", "trainer": "xgboost", "label_column": "target",
        "datasets": {"train": {"path": "../shared/t.csv"}, "valid": {"path": "./data/v.csv"},
                     "test": {"path": "s3://bucket/t.parquet"}}}))
    config = resolve_config(load_experiment(path))
    assert {k: d["path"] for k, d in config["datasets"].items()} == {
        "train": str(tmp_path / "shared" / "t.csv"), "valid": "data/v.csv",
        "test": "s3://bucket/t.parquet"}
    monkeypatch.chdir(tmp_path / "exp")   # as the job's copy of the working_dir would be
    written = {"datasets.train": "../shared/t.csv", "datasets.valid": "./data/v.csv",
               "datasets.test": "s3://bucket/t.parquet"}
    for job in (config, data.absolute_paths(config)):
        assert {k: v for k, v in tracking.params(job).items() if k.startswith("datasets.")} == \
            written


def test_the_written_paths_change_no_submission_id_and_no_plan(tmp_path, monkeypatch):
    """`written` came with an upgrade (issue 33) and is derived from what the id hashes already
    (the path, the file's place): an experiment submitted before it keeps its id, and `plan`
    sees no drift."""
    from orchestrator.gitops import desired
    from orchestrator.language.experiment import load_experiment
    from orchestrator.language.project import load_project
    from orchestrator.render import experiment

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.csv").write_text("a,target\n1,0\n")
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"name": "e", "trainer": "xgboost", "label_column": "target",
                                    "datasets": {"train": {"path": "data/t.csv"}}}))
    (tmp_path / "orchestrate.yaml").write_text("project: p\ninclude: ['*.yaml']\n")
    spec, project = load_experiment(path), load_project(tmp_path / "orchestrate.yaml")
    config = experiment.resolve_config(spec)
    assert config["datasets"]["train"]["written"] == "data/t.csv"
    now = (experiment.submission_id(config, "digest"),
           desired.desired_experiment(project, spec).hash)

    real = experiment.resolve_config   # as orchestrate rendered it before `written`

    def before(spec):
        config = real(spec)
        return {**config, "datasets": {name: {k: v for k, v in d.items() if k != "written"}
                                       for name, d in config["datasets"].items()}}
    monkeypatch.setattr(experiment, "resolve_config", before)
    old = experiment.resolve_config(spec)
    assert "written" not in old["datasets"]["train"]
    assert (experiment.submission_id(old, "digest"),
            desired.desired_experiment(project, spec).hash) == now


def test_submission_id_follows_the_content(tmp_path, capsys):
    source = (REPO / "experiments/custom-loop.yaml").read_text()
    (tmp_path / "custom_loop").mkdir()
    loop = tmp_path / "custom_loop" / "train.py"
    loop.write_text("def train_loop_per_worker(config):\n    pass\n")
    exp = tmp_path / "e.yaml"
    exp.write_text(source)
    first = json.loads(render(exp, capsys, "json"))["submission_id"]
    assert json.loads(render(exp, capsys, "json"))["submission_id"] == first
    loop.write_text("def train_loop_per_worker(config):\n    return 1\n")
    second = json.loads(render(exp, capsys, "json"))["submission_id"]
    exp.write_text(source.replace("epochs: 20", "epochs: 21"))
    third = json.loads(render(exp, capsys, "json"))["submission_id"]
    assert len({first, second, third}) == 3


def test_train_poll_keeps_the_controllers_calls_bounded_and_yields_to_the_user(tmp_path, capsys):
    """Ray Train's controller polls every worker once per interval: 0.2 s for a small run, Ray's
    own 2 s from 20 workers on; a value the user sets in env_vars wins."""
    from orchestrator.render.experiment import TRAIN_POLL_ENV, train_poll

    assert [train_poll(n)[TRAIN_POLL_ENV] for n in (1, 2, 8, 20, 400)] == \
        ["0.2", "0.2", "0.8", "2", "2"]
    spec = yaml.safe_load((REPO / "experiments/quickstart.yaml").read_text())
    spec["scaling_config"]["num_workers"] = 8
    spec["datasets"] = {k: {**v, "path": str(REPO / "experiments" / v["path"])}
                        for k, v in spec["datasets"].items()}
    path = tmp_path / "eight.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = yaml.safe_load(render(path, capsys))["runtime_env"]["env_vars"]
    assert env[TRAIN_POLL_ENV] == "0.8"
    spec["runtime_env"] = {"env_vars": {TRAIN_POLL_ENV: "1.5"}}
    path.write_text(yaml.safe_dump(spec))
    assert yaml.safe_load(render(path, capsys))["runtime_env"]["env_vars"][TRAIN_POLL_ENV] == "1.5"
