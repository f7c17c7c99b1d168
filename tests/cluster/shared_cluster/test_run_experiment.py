"""`orchestrate run` against a real cluster: the SSH-launched 3-host `local` cluster, token auth.

The hosts share this machine's file system (like an NFS mount) but nothing else: the run's
results and a dataset given by absolute path live in a shared folder; the working_dir (with the
other dataset) is uploaded by Ray. The head's login shell puts a Python without Ray first, and the
head's and a worker's hostnames resolve to loopback (see the `ssh_cluster` fixture): the job
runs anyway.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from orchestrator import contract
from orchestrator.cli import main

pytestmark = [pytest.mark.ssh, pytest.mark.ray, pytest.mark.xdist_group("shared_cluster")]

DATA = Path(__file__).resolve().parents[3] / "experiments" / "data"


def write_experiment(tmp_path: Path, shared: Path, cluster_file: Path, name: str) -> Path:
    code = tmp_path / "code"
    (code / "data").mkdir(parents=True)
    shutil.copy(DATA / "breast_cancer_train.csv", code / "data" / "train.csv")  # uploaded
    valid = shared / "valid.csv"
    shutil.copy(DATA / "breast_cancer_valid.csv", valid)                        # absolute path
    document = {
        "name": name,
        "cluster": str(cluster_file),
        "trainer": "torch",
        "working_dir": "code",
        "model": {"name": "mlp", "hidden_dims": [16], "num_classes": 2},
        "datasets": {"train": {"format": "csv", "path": "code/data/train.csv"},
                     "valid": {"format": "csv", "path": str(valid)}},
        "label_column": "target",
        "preprocessors": [{"type": "StandardScaler"}],
        "train_loop_config": {"lr": 0.01, "epochs": 2, "batch_size_per_worker": 64},
        # One torch worker per host: Gloo's full mesh crosses all three, the loopback one too.
        "scaling_config": {"num_workers": 3, "placement_strategy": "STRICT_SPREAD",
                           "resources_per_worker": {"CPU": 1}},
        "run_config": {"storage_path": str(shared / "results"),
                       "checkpoint_config": {"num_to_keep": 1}},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_the_hosts_are_as_in_the_wild(ssh_cluster):
    """What the run below must get past: found by preflight, and real on the hosts."""
    head, first, last = ssh_cluster.machine.hosts
    # The head's login shell (how Ray runs commands) finds a `python` that cannot import Ray.
    shell = head.in_host("bash --login -c -i 'command -v python; python -c \"import pyarrow\"'",
                         shell=True, check=False)
    assert shell.returncode != 0 and "No module named" in shell.stderr, shell
    # Two hosts' names resolve to loopback there (torch's Gloo would advertise that address to
    # the other ranks), and preflight warned for those two alone.
    resolved = [host.in_host("getent ahostsv4 $(hostname)", shell=True).stdout.split()[0]
                for host in (head, first, last)]
    assert resolved == ["127.0.1.1", "127.0.1.1", last.ip]
    warnings = [line for line in ssh_cluster.up_output.splitlines() if "resolves to loopback" in line]
    assert len(warnings) == 2 and head.ip in warnings[0] and first.ip in warnings[1], \
        ssh_cluster.up_output


def test_run_an_experiment_on_the_ssh_cluster(ssh_cluster, shared_dir, tmp_path, capsys,
                                               monkeypatch):
    from ray.job_submission import JobSubmissionClient

    name = "mlp-on-cluster"
    experiment = write_experiment(tmp_path, shared_dir, ssh_cluster.file, name)
    done = ssh_cluster.cli("run", str(experiment), "--quiet", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert "embedded Ray" not in done.stderr  # it went to the cluster, not to an embedded Ray
    assert f"to cluster {ssh_cluster.name}" in done.stderr
    assert "» epoch 1" in done.stderr and "» epoch 2" in done.stderr

    # The results are printed, and written where the nodes put them.
    summary = json.loads(done.stdout)
    assert summary["status"] == "SUCCEEDED" and summary["name"] == name
    assert 0.0 <= summary["metrics"]["accuracy"] <= 1.0 and summary["metrics"]["epoch"] == 2
    assert summary["run_path"] == str(shared_dir / "results" / name)
    assert Path(summary["history_csv"]).read_text().count("\n") == 3  # header + 2 epochs
    checkpoint = Path(summary["best_checkpoint"])
    assert (checkpoint / "model.pt").is_file()

    # The cluster's job API (with the token, through the SSH forward) has the job, SUCCEEDED.
    with ssh_cluster.open() as endpoint:
        client = JobSubmissionClient(endpoint.address, headers=ssh_cluster.headers)
        jobs = [j for j in client.list_jobs()
                if (j.submission_id or "").startswith(f"orchestrate-{name}-")]
        assert len(jobs) == 1
        assert str(jobs[0].status.value) == "SUCCEEDED"
        assert jobs[0].entrypoint == contract.ENTRYPOINT
        assert "ORCHESTRATE_RESULT" in client.get_job_logs(jobs[0].submission_id)

    # Where the job went is recorded: `logs` and `results` need no --cluster.
    logs = ssh_cluster.cli("logs", jobs[0].submission_id)
    assert logs.returncode == 0, logs.stderr
    assert "ORCHESTRATE_RESULT" in logs.stdout + logs.stderr
    results = ssh_cluster.cli("results", name, "--format", "json")
    assert results.returncode == 0, results.stderr
    assert json.loads(results.stdout)["best_checkpoint"] == summary["best_checkpoint"]

    job_commands_with_cluster(ssh_cluster, jobs[0].submission_id, name, capsys, monkeypatch)

    # Served from the cluster (its Serve proxy on the head's loopback), through the token.
    serve_on_the_cluster(ssh_cluster, experiment, tmp_path)


def job_commands_with_cluster(ssh_cluster, job_id: str, name: str, capsys, monkeypatch) -> None:
    """`jobs`, `logs` and `stop` told the cluster by name or file; unknown jobs and clusters.
    (The CLI's main in this process, on the cluster's ORCHESTRATE_HOME: no interpreter start.)"""
    monkeypatch.setenv("ORCHESTRATE_HOME", str(ssh_cluster.home))
    cluster = ssh_cluster.name

    def cli(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = cli("jobs", "--cluster", cluster, "--format", "json")
    assert code == 0, err
    [row] = [r for r in json.loads(out) if r["job_id"] == job_id]
    assert (row["status"], row["experiment"]) == ("SUCCEEDED", name) and row["end_time"]
    code, out, err = cli("jobs", "--cluster", str(ssh_cluster.file))  # by its file, as text
    assert code == 0, err
    header, *lines = out.splitlines()
    assert header.split() == ["JOB", "STATUS", "EXPERIMENT", "STARTED", "ENDED"]
    assert [line.split()[:3] for line in lines if line.startswith(job_id)] == \
        [[job_id, "SUCCEEDED", name]]

    code, out, err = cli("logs", job_id, "--cluster", cluster)
    assert code == 0, err
    assert "ORCHESTRATE_RESULT" in out
    code, out, err = cli("logs", "-f", job_id, "--cluster", cluster)  # it has already ended
    assert code == 0, err
    assert "ORCHESTRATE_RESULT" in out and err.strip().endswith(f"job {job_id}: SUCCEEDED")
    code, out, err = cli("stop", job_id, "--cluster", cluster)
    assert code == 0, err
    assert err.strip() == f"job {job_id}: was not running (SUCCEEDED)"

    for verb in ("logs", "stop"):
        code, out, err = cli(verb, "no-such-job", "--cluster", cluster)
        assert code == 1 and "Traceback" not in err
        assert f"ERROR no job 'no-such-job' on cluster {cluster}" in err, err
    code, out, err = cli("jobs", "--cluster", "no-such-cluster")
    assert code == 1 and "Traceback" not in err
    assert f"no cluster 'no-such-cluster' is recorded (known: {cluster})" in err


def serve_on_the_cluster(ssh_cluster, experiment: Path, tmp_path: Path) -> None:
    from orchestrator.util.ports import free_port

    service = tmp_path / "service.yaml"
    service.write_text(yaml.safe_dump({"name": "mlp-served", "cluster": str(ssh_cluster.file),
                                       "model": {"experiment": str(experiment)},
                                       "http_port": free_port(), "resources_per_replica": {"cpus": 0.5}}))
    done = ssh_cluster.cli("serve", str(service), "--format", "json")
    assert done.returncode == 0, done.stderr
    served = json.loads(done.stdout)
    assert served["cluster"] == ssh_cluster.name and served["status"] == "RUNNING"
    # On-prem as on clouds (issue 29): the proxy listens on the head's loopback, so the
    # service's token does not cross the LAN in clear either; reached here through a forward.
    port = int(served["url"].split(":")[2].split("/")[0])
    assert served["url"].startswith("http://127.0.0.1:")
    row = {k: float(v) for k, v in zip(*[line.split(",") for line in
                                          (DATA / "breast_cancer_valid.csv").read_text().splitlines()[:2]],
                                       strict=True) if k != "target"}
    with forward_to_head(ssh_cluster, port) as local:
        url = served["url"].replace(f":{port}", f":{local}", 1)
        assert post_status(url + "/predict", [row]) == 401
        assert post_status(url + "/predict", [row],
                           {"Authorization": f"Bearer {served['token']}"}) == 200
        removed = ssh_cluster.cli("unserve", "mlp-served")
        assert removed.returncode == 0, removed.stderr
        assert post_status(url + "/predict", [row],
                           {"Authorization": f"Bearer {served['token']}"}) == 404


@contextlib.contextmanager
def forward_to_head(ssh_cluster, port: int):
    from orchestrator import launch
    from orchestrator.state import State

    with monkeypatched_home(ssh_cluster.home):
        state = State.here()
        record = state.store.read_cluster(ssh_cluster.name)
        with launch.backend(record, state).forward(record, port, timeout=20) as local:
            yield local


@contextlib.contextmanager
def monkeypatched_home(home):
    before = os.environ.get("ORCHESTRATE_HOME")
    os.environ["ORCHESTRATE_HOME"] = str(home)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("ORCHESTRATE_HOME", None)
        else:
            os.environ["ORCHESTRATE_HOME"] = before


def post_status(url: str, body: dict, headers: dict | None = None) -> int:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_submission_without_the_token_is_refused(ssh_cluster):
    from orchestrator.clients.jobs import JobsClient
    from orchestrator.errors import JobError
    from orchestrator.reach.endpoint import Endpoint

    body = {"entrypoint": "echo should-not-run"}
    with ssh_cluster.open() as endpoint:   # the forward to the head's loopback
        url = endpoint.address + "/api/jobs/"
        assert post_status(url, body) == 401
        assert post_status(url, body, {"Authorization": "Bearer wrong"}) == 403
        with pytest.raises(JobError) as caught:  # our client without the token says so
            JobsClient(Endpoint(endpoint.address, None, "cluster x")).submit(
                entrypoint="echo should-not-run", runtime_env={}, submission_id="no-token")
        assert "refused the token" in (caught.value.hint or "")
        client_jobs = JobsClient(Endpoint(endpoint.address, ssh_cluster.token, "c")).list()
    assert not [j for j in client_jobs if "should-not-run" in (j.entrypoint or "")]
