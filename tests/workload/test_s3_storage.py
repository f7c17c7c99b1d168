"""A run whose storage is S3 (issue 48): trained on the embedded Ray, then its results, runs,
predict, serve and the demo page read back from S3. Ray Train's `Checkpoint.path` for
`s3://bucket/x` storage is `bucket/x/...` without the scheme: recorded as it was, the run
failed at its end ("URI has empty scheme"). S3 is moto's server on loopback (AWS's API faked
at the wire; pyarrow's and boto3's real clients talk to it through AWS_ENDPOINT_URL, as a
user's MinIO would be reached); the embedded Ray is started by `run` with this environment, as
a user's shell would start it."""
from __future__ import annotations

import json
import urllib.request

import pytest

from orchestrator.cli import main
from orchestrator.state import State, demo_key
from orchestrator.workload.demo_page import cookie_header
from tests.moto_server import aws_env, make_bucket, moto_server  # noqa: F401 - fixtures

from .conftest import MLP, TABLE
from .test_serve import call, write_service

# The ray tier, not the local one (own_ray): the test starts an embedded Ray of its own, with
# this environment, but tests nothing of its life cycle; beside the fast tier it made that tier
# 1:50 longer (4:18, fresh clone, 2026-12-02).
pytestmark = [pytest.mark.ray]

BUCKET = "runs"


def cli_json(capsys, *args: str) -> tuple[int, dict | list, str]:
    code = main([*args, "--format", "json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 and out.strip() else {}), err


def test_a_run_on_s3_storage_trains_predicts_and_serves(aws_env, experiment, data_dir,  # noqa: F811
                                                         tmp_path, capsys, monkeypatch):
    import pyarrow.dataset
    import pyarrow.fs

    make_bucket(aws_env, BUCKET)
    monkeypatch.setenv("ORCHESTRATE_EMBEDDED_RAY_IDLE", "10m")   # one Ray for the run, predict, serve
    path = experiment("s3-mlp", trainer="torch", model=MLP, datasets=TABLE, label_column="target",
                      preprocessors=[{"type": "StandardScaler"}],
                      scaling_config={"num_workers": 1},
                      train_loop_config={"lr": 0.01, "epochs": 2, "batch_size_per_worker": 64},
                      run_config={"storage_path": f"s3://{BUCKET}/team",
                                  "checkpoint_config": {"num_to_keep": 1,
                                                        "checkpoint_score_attribute": "accuracy",
                                                        "checkpoint_score_order": "max"}})
    try:
        code, ran, err = cli_json(capsys, "run", str(path), "--quiet")
        assert code == 0, err
        assert ran["status"] == "SUCCEEDED" and ran["run_path"] == f"s3://{BUCKET}/team/s3-mlp"
        best = ran["best_checkpoint"]
        assert best.startswith(f"s3://{BUCKET}/team/s3-mlp/checkpoint_"), best
        s3, _ = pyarrow.fs.FileSystem.from_uri(f"s3://{BUCKET}")   # AWS_ENDPOINT_URL: moto
        assert s3.get_file_info(best.removeprefix("s3://") + "/model.pt").is_file
        history = json.loads(s3.open_input_stream(
            f"{BUCKET}/team/s3-mlp/orchestrate/metrics.json").read())
        assert [row["checkpoint"].split("://")[0] for row in history] == ["s3", "s3"]

        code, shown, err = cli_json(capsys, "results", "s3-mlp")
        assert code == 0, err
        assert shown["best_checkpoint"] == best and shown["run_path"] == ran["run_path"]
        code, listed, err = cli_json(capsys, "runs", "s3-mlp")
        assert code == 0, err
        assert [row["status"] for row in listed] == ["SUCCEEDED"], listed

        # predict from the experiment: its run found on S3, the predictions written there
        data = str(data_dir / "breast_cancer.csv")
        code, predicted, err = cli_json(capsys, "predict", str(path), "--data", data,
                                        "--output", f"s3://{BUCKET}/predictions", "--evaluate")
        assert code == 0, err
        assert predicted["checkpoint"] == best and predicted["metrics"]["accuracy"] > 0.8
        assert predicted["output"] == f"s3://{BUCKET}/predictions/predictions"
        files = [info.path for info in s3.get_file_info(pyarrow.fs.FileSelector(
            predicted["output"].removeprefix("s3://"))) if info.path.endswith(".parquet")]
        written = pyarrow.dataset.dataset(files, filesystem=s3).to_table()
        assert written.num_rows == predicted["rows"] > 0

        # serve it: the replica loads the checkpoint and its card from S3; the demo page too
        service = write_service(tmp_path, "s3-cancer", model={"experiment": str(path)},
                                route_prefix="/s3-cancer", replicas=1,
                                resources_per_replica={"cpus": 0.5}, demo=True)
        code, served, err = cli_json(capsys, "serve", str(service))
        assert code == 0, err
        assert served["status"] == "RUNNING" and served["checkpoint"] == best
        url, token = served["url"], served["token"]
        rows = [{k: v for k, v in row.items() if k != "target"}
                for row in written.slice(0, 3).to_pylist()]
        rows = [{k: v for k, v in row.items() if not k.startswith(("prediction", "probability"))}
                for row in rows]
        status, answer = call(url + "/predict", rows, token=token)
        assert status == 200 and len(answer["predictions"]) == 3, answer
        secret = State.here().secrets.read(demo_key("s3-cancer"))
        cookie = cookie_header(secret, "/s3-cancer").split(";")[0]
        config = urllib.request.Request(url + "/demo/config", headers={"Cookie": cookie})
        with urllib.request.urlopen(config, timeout=60) as answered:   # the Gradio page's form
            assert answered.status == 200 and "mean radius" in answered.read().decode()
        asked = urllib.request.Request(url + "/predict", data=json.dumps(rows[:1]).encode(),
                                       headers={"Authorization": f"Bearer {token}",
                                                "Content-Type": "application/json"})
        with urllib.request.urlopen(asked, timeout=60) as answered:
            [first] = json.loads(answered.read())["predictions"]
        # one row alone, not in a batch of three: the same to float32's precision
        assert first == pytest.approx(answer["predictions"][0], rel=1e-5, abs=1e-7)
        assert main(["unserve", "s3-cancer"]) == 0
    finally:
        main(["stop", "--local-ray"])
        capsys.readouterr()
