"""A RayJob's run, on a real Ray, submitted exactly as KubeRay's submitter submits it.

KubeRay (v1.7.0, K8sJobMode) runs one bash line in its submitter pod (ray-operator/controllers/
ray/common/job.go:89-212): `ray job status` of the job id, else `ray job submit --address ...
--no-wait --runtime-env-json "<the runtimeEnvYAML as JSON, Go-quoted>" --submission-id <jobId>
-- <entrypoint>`, then `ray job logs --follow`; with RAY_AUTH_MODE=token and RAY_AUTH_TOKEN
from the cluster's Secret. No Kubernetes cluster can run here; the shared local Ray stands in
for the RayJob's cluster (its job API at the address the submitter would use), and the job's
code comes from a file:// package store, as the cluster's pods would read a mounted one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.language.experiment import load_experiment
from orchestrator.render.experiment import render_job, ship
from orchestrator.run import package_store, rayjob

pytestmark = pytest.mark.ray
REPO = Path(__file__).resolve().parents[2]


def go_quote(text: str) -> str:
    """strconv.Quote for the JSON KubeRay makes: `"` and `\\` escaped, in double quotes."""
    return json.dumps(text, ensure_ascii=False)


def submitter_line(address: str, job: dict) -> str:
    spec = job["spec"]
    runtime_env = json.dumps(yaml.safe_load(spec["runtimeEnvYAML"]), separators=(",", ":"),
                             sort_keys=True)
    job_id = spec["jobId"]
    return (f"if ! ray job status --address {address} {job_id} >/dev/null 2>&1 ; then "
            f"ray job submit --address {address} --no-wait --runtime-env-json "
            f"{go_quote(runtime_env)} --submission-id {job_id} -- {spec['entrypoint']} ; fi ; "
            f"ray job logs --address {address} --follow {job_id}")


def test_the_rayjobs_entrypoint_trains_on_ray_as_kuberays_submitter_submits_it(
        local_ray, shared_ray, tmp_path):
    import shutil

    work = tmp_path / "exp"
    (work / "data").mkdir(parents=True)
    shutil.copy(REPO / "experiments" / "data" / "breast_cancer_train.csv", work / "data")
    shutil.copy(REPO / "cluster_configs" / "kuberay.yaml", tmp_path / "kuberay.yaml")
    store = tmp_path / "store"
    path = work / "e.yaml"
    path.write_text(f"""name: rayjob-tiny
cluster: ../kuberay.yaml
own_cluster: {{package_store: "file://{store}"}}
trainer: xgboost
datasets: {{train: {{format: csv, path: data/breast_cancer_train.csv}}}}
label_column: target
params: {{objective: "binary:logistic", eval_metric: [logloss]}}
num_boost_round: 3
scaling_config: {{num_workers: 1}}
run_config: {{storage_path: "{tmp_path / 'results'}"}}
""")
    spec = load_experiment(path)
    shipped = ship(spec)
    job = rayjob.manifest(spec, render_job(spec, shipped), shipped)
    package_store.put(f"file://{store}", shipped, lambda _: None)

    environment = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": shared_ray.token,
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["/bin/bash", "-ce", "--", submitter_line(local_ray.address, job)],
                          env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    status = subprocess.run(["ray", "job", "status", "--address", local_ray.address,
                             job["spec"]["jobId"]], env=environment, capture_output=True,
                            text=True, timeout=120)
    assert "succeeded" in status.stdout.lower(), status.stdout + status.stderr
    assert "ORCHESTRATE_RESULT" in done.stdout   # the workload's own mark: it trained
    run = tmp_path / "results" / "rayjob-tiny"   # the run's checkpoints and its metrics
    assert list(run.glob("checkpoint_*/model.ubj"))
    assert json.loads((run / "orchestrate" / "metrics.json").read_text())
