"""`orchestrate serve` end to end on the embedded local Ray: the session's XGBoost run served by
Ray Serve through the dashboard's REST API, with real HTTP requests to Serve's proxy on
loopback."""
from __future__ import annotations

import hashlib
import json
import stat
import threading
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd
import pytest
import yaml

from orchestrator.cli import main
from orchestrator.serving import serve as serving
from orchestrator.state import State, demo_key
from orchestrator.workload import demo_page
from tests.squatters import Squatter

from .demo_browser import predict_with, refused, same_answer, screenshot, signed_in, status_of
from .test_predict import card_of


def call(url: str, body: object = None, token: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers,
                                     method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            return exc.code, json.loads(text or b"{}")
        except ValueError:
            return exc.code, {"text": text.decode(errors="replace")}


def write_service(folder: Path, name: str, **document) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **document}, sort_keys=False))
    return path


def serve_json(capsys, path: Path) -> tuple[int, dict, str]:
    code = main(["serve", str(path), "--format", "json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else {}), err


@pytest.mark.ray
@pytest.mark.xdist_group("trained-boosted")
def test_serve_update_and_unserve(trained, local_ray, tmp_path, capsys, monkeypatch):
    xgb = trained.xgboost
    xgb.use(monkeypatch)   # `serve` finds the run of the experiment file in its home
    path, result = xgb.path, xgb.summary
    history = json.loads((Path(result["run_path"]) / "orchestrate" / "metrics.json").read_text())
    checkpoints = [row["checkpoint"] for row in history if row.get("checkpoint")]
    assert len(checkpoints) >= 2

    service = write_service(tmp_path, "cancer", model={"experiment": str(path)},
                            route_prefix="/cancer", replicas=1,
                            resources_per_replica={"cpus": 0.5},
                            batching={"max_batch_size": 8, "batch_wait_timeout_s": 0.01},
                            demo=True)
    code, served, err = serve_json(capsys, service)
    assert code == 0, err
    url, token = served["url"], served["token"]
    assert served["status"] == "RUNNING" and served["checkpoint"] == result["best_checkpoint"]
    assert served["demo"] == url + "/demo/"
    token_file = Path(served["token_file"])
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert token_file.read_text().strip() == token

    # only the token's hash reaches the cluster (the Serve config is readable via the dashboard)
    endpoint = local_ray.endpoint(State.here().secrets)
    request = urllib.request.Request(endpoint.address + "/api/serve/applications/",
                                     headers=endpoint.headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        deployed = response.read().decode()
    assert token not in deployed and hashlib.sha256(token.encode()).hexdigest() in deployed
    demo_file = State.here().secrets.path(demo_key("cancer"))   # the page's own secret, likewise
    secret = demo_file.read_text().strip()
    assert stat.S_IMODE(demo_file.stat().st_mode) == 0o600 and secret != token
    assert secret not in deployed and hashlib.sha256(secret.encode()).hexdigest() in deployed

    data = path.parent / "data" / "breast_cancer.csv"
    frame = pd.read_csv(data)
    rows = frame.drop(columns=["target"]).head(20).to_dict(orient="records")
    assert call(url + "/predict", rows)[0] == 401
    assert call(url + "/predict", rows, token="not-the-token")[0] == 401
    assert call(url + "/metadata")[0] == 401
    assert call(url + "/healthz") == (200, {"status": "ok"})  # health needs no token
    status, answer = call(url + "/predict", rows, token=token)
    assert status == 200, answer
    assert len(answer["predictions"]) == 20
    status, columns = call(url + "/predict", {"columns": {k: [r[k] for r in rows] for k in rows[0]}},
                           token=token)
    assert columns == answer  # records or columns: the same rows
    assert call(url + "/predict", [{"mean radius": 1.0}], token=token)[0] == 400

    # the same rows through the served checkpoint and the run's fitted preprocessor, applied
    # here with XGBoost's own API (test_predict.py holds `orchestrate predict` to the same)
    import xgboost

    card, preprocessor = card_of(Path(result["run_path"]))
    booster = xgboost.Booster()
    booster.load_model(str(Path(served["checkpoint"]) / "model.ubj"))
    features = list(rows[0])
    table = preprocessor.transform_batch(pd.DataFrame(rows))[card["features"]]
    expected = booster.predict(xgboost.DMatrix(table))
    served_probabilities = [p["probability_1"] for p in answer["predictions"]]
    assert max(abs(a - b) for a, b in zip(served_probabilities, expected, strict=True)) < 1e-6
    assert [p["prediction"] for p in answer["predictions"]] == [int(v > 0.5) for v in expected]

    check_table_page(url, token, secret, card, frame, tmp_path)

    # unchanged: nothing is deployed again
    code, again, err = serve_json(capsys, service)
    assert code == 0 and again["changed"] is False, err

    # another checkpoint while a client keeps asking: no answer but 200
    codes: list[object] = []
    stop = threading.Event()

    def client() -> None:   # from before the update until it is done, and 10 answers at least
        while not stop.is_set() or len(codes) < 10:
            codes.append(call(url + "/predict", rows[:2], token=token)[0])

    thread = threading.Thread(target=client)
    thread.start()
    try:
        moved = write_service(tmp_path, "cancer", model={"checkpoint": checkpoints[0]},
                              route_prefix="/cancer", replicas=1,
                              resources_per_replica={"cpus": 0.5},
                              batching={"max_batch_size": 8, "batch_wait_timeout_s": 0.01})
        code, updated, err = serve_json(capsys, moved)
    finally:
        stop.set()
        thread.join()
    assert code == 0 and updated["changed"], err
    assert Counter(codes) == Counter({200: len(codes)})
    # the new file asks for no page: none served (its routes answer as any unknown one)
    assert status_of(url + "/demo/") == 404
    page_cookie = {"Cookie": demo_page.cookie_header(secret, "/cancer").split(";")[0]}
    assert status_of(url + "/demo/config", page_cookie) == 404
    assert not demo_file.exists()   # on again: a new secret, the old cookie lets no one in
    status, metadata = call(url + "/metadata", token=token)
    assert status == 200 and metadata["checkpoint"] == checkpoints[0]
    assert metadata["features"] == features

    # a second application; a route it already serves is refused for a third
    other = write_service(tmp_path, "other", model={"checkpoint": checkpoints[-1]},
                          route_prefix="/other", auth="none", resources_per_replica={"cpus": 0.5},
                          demo=True)
    code, second, err = serve_json(capsys, other)
    assert code == 0, err
    assert call(second["url"] + "/predict", rows[:1])[0] == 200  # auth: none
    assert status_of(second["url"] + "/demo/") == 200   # auth: none, the page open to all
    clash = write_service(tmp_path, "clash", model={"checkpoint": checkpoints[-1]},
                          route_prefix="/other")
    assert main(["serve", str(clash)]) == 1
    assert "the route /other is served by the application 'other'" in capsys.readouterr().err

    # unserve removes only its own application
    assert main(["unserve", "cancer"]) == 0
    capsys.readouterr()
    assert call(url + "/healthz")[0] == 404
    assert call(second["url"] + "/predict", rows[:1])[0] == 200
    assert main(["serve", "--status", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)["services"]
    assert [(s["name"], s["status"]) for s in listed] == [("other", "RUNNING")]
    assert not token_file.exists()
    assert main(["unserve", "cancer"]) == 0  # again: nothing to remove, not an error


def check_table_page(url: str, token: str, secret: str, card: dict, frame: pd.DataFrame,
                     tmp_path: Path) -> None:
    """The demo page in Chromium: a form of the card's columns prefilled from its example row
    (the train split's first); another row typed in shows what `POST predict` answers for it;
    a browser without the token is refused."""
    features = card["required_columns"]
    first = frame.iloc[0]
    assert card["example"] == {c: first[c].item() for c in features}
    assert card["column_kinds"] == dict.fromkeys(features, "number")
    # the cookie opens the page's routes, never the API; a page of another origin (another
    # port of 127.0.0.1 gets the cookie too) cannot call predict; the page's secret is no token
    cookie = {"Cookie": demo_page.cookie_header(secret, "/cancer").split(";")[0]}
    host = url.split("/")[2]
    assert status_of(url + "/demo/config", cookie) == 200
    assert status_of(url + "/demo/gradio_api/queue/join", cookie, method="POST") == 403
    assert status_of(url + "/demo/gradio_api/queue/join",
                     {**cookie, "Origin": "http://127.0.0.1:1"}, method="POST") == 403
    assert status_of(url + "/demo/gradio_api/run/predict",
                     {**cookie, "Origin": f"http://{host}"}, method="POST") == 404
    assert status_of(url + "/predict", cookie, method="POST") == 401
    assert status_of(url + "/metadata", cookie) == 401
    # the page's secret itself is no sign-in (a cookie leaked once would open the page for good)
    raw = {"Cookie": f"orchestrate-demo={secret}"}
    assert status_of(url + "/demo/", raw) == 401
    assert status_of(url + "/demo/config", raw) == 401
    assert status_of(url + "/predict", {"Authorization": f"Bearer {secret}"}, method="POST") == 401
    assert status_of(url + "/sign-in", {"Authorization": f"Bearer {token}"}, method="POST") == 404

    with signed_in("cancer", token, tmp_path / "profile-a") as (driver, report):
        assert report["url"] == url + "/demo/"
        # a row the model answers otherwise than the example: what is shown is the typed row's
        _, some = call(url + "/predict", frame[features].head(40).to_dict(orient="records"),
                       token=token)
        index = next(i for i, p in enumerate(some["predictions"])
                     if p["prediction"] != some["predictions"][0]["prediction"])
        row = frame.iloc[index]
        shown = predict_with(driver, {c: repr(row[c].item()) for c in features})
        from orchestrator.workload.demo_app import element_id

        assert [float(shown["fields"][element_id(c)]) for c in features] == \
            [first[c] for c in features]   # prefilled from the example row
        status, answer = call(url + "/predict", [{c: row[c].item() for c in features}],
                              token=token)
        assert status == 200, answer
        same_answer(shown["label"], answer["predictions"][0])
        screenshot(driver, "demo-table.png")
        refused(url, "cancer", report["sign_in_url"], tmp_path / "profile-b")


@pytest.mark.ray
@pytest.mark.xdist_group("trained-boosted")
def test_a_port_another_process_holds_is_given_up_not_kept(trained, local_ray, tmp_path,
                                                           capsys, monkeypatch):
    """Serve's proxy binds its port only after the PUT that starts Serve, and a Serve keeps the
    options it started with until it stops. A port another process holds (here a listener that
    records what it is sent) must not leave Serve started on it: a port the file gives is
    refused, naming it, and Serve is shut down again; a port picked free for the embedded Ray
    that another process bound in between is replaced by another (seen once in the ray tier,
    "Failed to bind to address '127.0.0.1:43027'"). The first pick is made to be the held
    port; Serve, the refusal's text and the shutdown are Ray's own."""
    xgb = trained.xgboost
    xgb.use(monkeypatch)
    model = {"experiment": str(xgb.path)}
    squatter = Squatter(tmp_path / "squatter.log")
    try:
        given = write_service(tmp_path, "held", model=model, route_prefix="/held",
                              http_port=squatter.port, resources_per_replica={"cpus": 0.5})
        assert main(["serve", str(given)]) == 1
        err = capsys.readouterr().err
        assert f"Failed to bind to address '127.0.0.1:{squatter.port}'" in err, err
        assert "set another http_port" in err and "Traceback" not in err

        picks = iter([squatter.port])
        real = serving.free_port
        monkeypatch.setattr(serving, "free_port", lambda: next(picks, None) or real())
        service = write_service(tmp_path, "moved", model=model, route_prefix="/moved",
                                resources_per_replica={"cpus": 0.5})
        code, served, err = serve_json(capsys, service)
        assert code == 0, err   # without the shutdown above, Serve would still want the port
        assert next(picks, None) is None, "the held port was never offered"
        assert f"port {squatter.port} was taken before Serve could bind it" in err
        assert urlparse(served["url"]).port != squatter.port
        assert call(served["url"] + "/healthz") == (200, {"status": "ok"})
        status, answer = call(served["url"] + "/metadata", token=served["token"])
        assert status == 200, answer
        assert squatter.received == b"", "a request reached the process holding the port"
    finally:
        squatter.close()


def test_serving_a_run_that_never_happened(tmp_path, capsys):
    experiment_file = tmp_path / "never.yaml"
    experiment_file.write_text(yaml.safe_dump({
        "name": "never", "trainer": "xgboost", "label_column": "target",
        "datasets": {"train": {"path": str(tmp_path)}}}))
    service = write_service(tmp_path, "never-served", model={"experiment": str(experiment_file)})
    assert main(["serve", str(service)]) == 1
    err = capsys.readouterr().err
    assert "model.experiment: no finished run of" in err and "orchestrate run" in err


@pytest.mark.ray
@pytest.mark.xdist_group("trained-boosted")
def test_a_rayservices_serve_config_answers_when_deployed_as_kuberay_deploys_it(
        trained, local_ray, tmp_path):
    """KubeRay (v1.7.0) reads a RayService's serveConfigV2 as YAML, turns it into JSON and PUTs
    it to the cluster's dashboard at /api/serve/applications/ (rayservice_controller.go
    1576-1599, dashboard_httpclient.go 62-87). Here the shared local Ray stands in for the
    RayService's cluster (no Kubernetes runs here) and orchestrate's package comes from a
    file:// store, as a pod would read a mounted one; only http_options' host is this machine's
    loopback, where the pod listens on all its addresses."""
    from orchestrator.language.cluster import load_cluster
    from orchestrator.language.service import load_service
    from orchestrator.launch.kuberay import manifests as kuberay
    from orchestrator.render import service
    from orchestrator.render.cluster import render_cluster
    from orchestrator.run import package_store
    from orchestrator.util.ports import free_port

    repo = Path(__file__).resolve().parents[2]
    store = f"file://{tmp_path / 'store'}"
    uris = package_store.put(store, None, lambda _: None)
    path = write_service(tmp_path, "cancer-k8s", model={"checkpoint": trained.xgboost.summary[
        "best_checkpoint"]}, route_prefix="/k8s", resources_per_replica={"cpus": 0.5})
    token = "a-token-for-the-rayservice-test"
    application = service.render_application(
        load_service(path), checkpoint=trained.xgboost.summary["best_checkpoint"],
        token_sha256=hashlib.sha256(token.encode()).hexdigest(), package_uri=uris["orchestrate"])
    cluster = render_cluster(load_cluster(repo / "cluster_configs" / "kuberay.yaml"),
                             token_file="-").config
    port = free_port()
    resource = kuberay.ray_service(
        service.render_config(application, service.http_options("0.0.0.0", port)), cluster)
    assert kuberay.findings_at(resource) == []

    config = yaml.safe_load(resource["spec"]["serveConfigV2"])
    assert config["http_options"] == {"host": "0.0.0.0", "port": port}
    config["http_options"]["host"] = "127.0.0.1"
    endpoint = local_ray.endpoint(State.here().secrets)
    request = urllib.request.Request(endpoint.address + "/api/serve/applications/",
                                     data=json.dumps(config).encode(), method="PUT",
                                     headers={**endpoint.headers,
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
    url = f"http://127.0.0.1:{port}/k8s"
    import time

    deadline = time.monotonic() + 180
    while call(url + "/healthz")[0] != 200:
        assert time.monotonic() < deadline, "the RayService's application never answered"
        time.sleep(1)
    rows = pd.read_csv(trained.xgboost.path.parent / "data" / "breast_cancer.csv").drop(
        columns=["target"]).head(3).to_dict(orient="records")
    assert call(url + "/predict", rows)[0] == 401
    status, answer = call(url + "/predict", rows, token=token)
    assert status == 200 and len(answer["predictions"]) == 3, answer
