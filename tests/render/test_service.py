"""A service file rendered into Ray Serve's own config, and the application's request handling
that needs no Ray: the token check, the body shapes, the merge that keeps other applications."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.contract import SERVE_DEPLOYMENT, SERVE_IMPORT_PATH
from orchestrator.language.service import load_service
from orchestrator.render import service
from orchestrator.workload.access import token_matches
from orchestrator.workload.rows import rows_of


def serve_schema():
    """Ray Serve's schema of the REST API's PUT, imported when a test asks: ray.serve takes 1-2 s
    to import, which every pytest process paid when it collected this file."""
    from ray.serve.schema import ServeDeploySchema

    return ServeDeploySchema


def service_file(tmp_path: Path, text: str) -> Path:
    (tmp_path / "run").mkdir(exist_ok=True)
    path = tmp_path / "svc.yaml"
    path.write_text(text)
    return path


def test_the_rendered_config_is_servable_as_ray_reads_it(tmp_path):
    spec = load_service(service_file(tmp_path, """
name: cancer
model: {run: run, checkpoint: latest}
replicas: 2
resources_per_replica: {cpus: 0.5, gpus: 0}
max_ongoing_requests: 16
batching: {max_batch_size: 8, batch_wait_timeout_s: 0.02}
"""))
    assert spec.route_prefix == "/cancer" and spec.checkpoint == "latest"
    assert spec.source == str(tmp_path / "run")
    app = service.render_application(spec, checkpoint="/c", token_sha256="ab",
                                     package_uri="gcs://_ray_pkg_x.zip")
    config = service.render_config(app, service.http_options("127.0.0.1", 8123))
    serve_schema().model_validate(config)  # Ray's own schema for the REST API's PUT
    (deployment,) = app["deployments"]
    assert app["import_path"] == SERVE_IMPORT_PATH and deployment["name"] == SERVE_DEPLOYMENT
    assert deployment["num_replicas"] == 2 and deployment["max_ongoing_requests"] == 16
    assert deployment["ray_actor_options"] == {"num_cpus": 0.5, "num_gpus": 0}
    assert deployment["user_config"] == {"checkpoint": "/c", "auth": "token", "token_sha256": "ab",
                                         "max_batch_size": 8, "batch_wait_timeout_s": 0.02,
                                         "use_gpu": False}
    assert app["runtime_env"]["py_modules"] == ["gcs://_ray_pkg_x.zip"]


def test_autoscaling_instead_of_replicas(tmp_path):
    spec = load_service(service_file(tmp_path, """
name: auto
model: {run: run}
route_prefix: /a/b
autoscaling: {min_replicas: 0, max_replicas: 4, target_ongoing_requests: 2}
auth: none
"""))
    app = service.render_application(spec, checkpoint="/c", token_sha256=None,
                                     package_uri="gcs://_ray_pkg_y.zip")
    (deployment,) = app["deployments"]
    assert "num_replicas" not in deployment
    assert deployment["autoscaling_config"] == {"min_replicas": 0, "max_replicas": 4,
                                                "target_ongoing_requests": 2}
    assert deployment["user_config"]["token_sha256"] is None
    assert deployment["user_config"]["auth"] == "none"
    serve_schema().model_validate(service.render_config(app, service.http_options("h", 1)))


def test_merge_keeps_the_other_applications_as_serve_reports_them():
    other = {"name": "theirs", "route_prefix": "/x", "import_path": "m:app", "args": {"k": 1}}
    old = {"name": "ours", "route_prefix": "/o", "import_path": "old"}
    new = {"name": "ours", "route_prefix": "/o", "import_path": "new"}
    assert service.merge([other, old], new) == [other, new]
    assert service.without([other, old], "ours") == [other]
    assert service.route_owner([other, old], {"name": "ours", "route_prefix": "/x"}) == "theirs"
    assert service.route_owner([other, old], new) is None


def test_the_token_check():
    digest = hashlib.sha256(b"s3cret").hexdigest()
    config = {"auth": "token", "token_sha256": digest}
    assert token_matches("Bearer s3cret", config)
    assert token_matches("bearer s3cret", config)
    assert not token_matches("Bearer wrong", config)
    assert not token_matches("Basic s3cret", config)
    assert not token_matches(None, config)
    assert not token_matches("Bearer ", config)
    assert token_matches(None, {"auth": "none", "token_sha256": None})  # written out


def test_the_token_check_fails_closed():
    """Only `auth: none`, written out, opens the routes: a config whose hash is missing, empty
    or not a SHA-256 (an older orchestrate's, a hand-edited one, a replica not yet configured)
    refuses every request."""
    digest = hashlib.sha256(b"s3cret").hexdigest()
    for broken in ({}, {"token_sha256": None}, {"auth": "token"},
                   {"auth": "token", "token_sha256": None}, {"auth": "token", "token_sha256": ""},
                   {"auth": "token", "token_sha256": "ab"}, {"auth": "off", "token_sha256": None},
                   {"auth": "token", "token_sha256": digest.upper()[:-1]}):
        for header in (None, "Bearer s3cret", "Bearer ", "Bearer None"):
            assert not token_matches(header, broken), (header, broken)


def test_request_bodies():
    records = rows_of([{"a": 1, "b": 2}, {"a": 3, "b": 4}])
    columns = rows_of({"columns": {"a": [1, 3], "b": [2, 4]}})
    assert records.equals(columns) and list(records["a"]) == [1, 3]
    assert len(rows_of({"records": [{"a": 1}]})) == 1
    for bad in ("text", [1, 2], {"a": [1], "b": [1, 2]}, {"a": 1}):
        with pytest.raises(ValueError):
            rows_of(bad)


def test_render_shows_the_serve_config(tmp_path, capsys):
    path = service_file(tmp_path, "name: shown\nmodel: {run: run}\nhttp_port: 8400\n")
    assert main(["render", str(path), "--format", "json"]) == 0
    import json

    shown = json.loads(capsys.readouterr().out)
    assert shown["http_options"] == {"host": "127.0.0.1", "port": 8400}
    assert shown["applications"][0]["name"] == "shown"
    # the run folder has no checkpoint yet: render says what it would serve instead of failing
    assert shown["applications"][0]["deployments"][0]["user_config"]["checkpoint"].startswith("<")


def test_answers_keep_every_digit_and_are_plain_json():
    import json

    import numpy as np
    import pandas as pd

    from orchestrator.workload.serving import plain

    frame = pd.DataFrame({"prediction": np.array([1, 0], dtype=np.int64),
                          "probability_1": np.array([0.9697278141975403, 0.25], dtype=np.float64)})
    rows = plain(frame)
    assert rows == [{"prediction": 1, "probability_1": 0.9697278141975403},
                    {"prediction": 0, "probability_1": 0.25}]
    assert json.loads(json.dumps(rows)) == rows  # no numpy scalars left


def test_serve_wants_one_file(tmp_path, capsys):
    assert main(["serve"]) == 2
    assert main(["serve", "a.yaml", "b.yaml"]) == 2
    assert "give one service file" in capsys.readouterr().err
