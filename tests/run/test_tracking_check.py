"""`tracking.mlflow` checked before submission (run.tracking), over real HTTP to servers this
test starts on loopback: an MLflow-shaped answer passes, anything else fails naming the file,
line and field, with exit code 1 and nothing started. The real MLflow server is in
tests/workload/test_tracking.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.errors import SpecError
from orchestrator.language.experiment import load_experiment
from orchestrator.run.experiment import RunOptions, prepare
from orchestrator.util.ports import free_port

from .test_prepare import experiment


class Answer(BaseHTTPRequestHandler):
    status, body, seen = 404, b"", []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_args) -> None:
        pass


@pytest.fixture
def server():
    """A loopback server answering what the test sets on `Answer`."""
    Answer.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def tracked(tmp_path, **mlflow):
    return experiment(tmp_path / "exp", tracking={"mlflow": mlflow})


def refused(path) -> tuple[str, str | None, int | None, str | None]:
    with pytest.raises(SpecError) as caught:
        prepare(load_experiment(path), RunOptions(), print)
    (problem,) = caught.value.problems
    assert problem.file == str(path)
    return problem.message, problem.hint, problem.line, problem.field


def test_an_mlflow_server_without_the_experiment_yet_passes(tmp_path, server, monkeypatch):
    Answer.status = 404
    Answer.body = json.dumps({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "x"}).encode()
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok-123")
    path = tracked(tmp_path, tracking_uri=server, experiment_name="my exp")
    plan = prepare(load_experiment(path), RunOptions(), print)
    (request, auth), = Answer.seen
    assert request == "/api/2.0/mlflow/experiments/get-by-name?experiment_name=my+exp"
    assert auth == "Bearer tok-123"                       # the credentials the job will get
    assert plan.secrets["MLFLOW_TRACKING_TOKEN"] == "MLFLOW_TRACKING_TOKEN"
    rendered = json.dumps(plan.as_dict())
    assert "tok-123" not in rendered                      # shipped apart, never rendered
    assert plan.config["tracking"]["tracking_uri"] == server


def test_what_is_not_an_mlflow_server_is_refused_with_the_field(tmp_path, server):
    Answer.status, Answer.body = 404, b"<html>Not Found</html>"
    path = tracked(tmp_path, tracking_uri=server)
    message, hint, line, field = refused(path)
    assert "answers HTTP 404 to MLflow's API: not an MLflow tracking server" in message
    assert field == "tracking.mlflow.tracking_uri"
    text = path.read_text().splitlines()
    assert "tracking_uri" in text[line - 1]


def test_refused_credentials_name_the_variables(tmp_path, server, monkeypatch):
    Answer.status, Answer.body = 401, b"{}"
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "ann")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "pw-secret-9")
    message, hint, _, _ = refused(tracked(tmp_path, tracking_uri=server))
    assert "refused the credentials (HTTP 401)" in message and "MLFLOW_TRACKING_TOKEN" in hint
    assert Answer.seen[0][1].startswith("Basic ")
    assert "pw-secret-9" not in message + hint


def test_a_password_in_the_uri_is_refused_unshown(tmp_path, server):
    url = server.replace("http://", "http://ann:pw-in-uri-7@")
    message, hint, _, _ = refused(tracked(tmp_path, tracking_uri=url))
    assert "carries a password" in message and "MLFLOW_TRACKING_PASSWORD" in hint
    assert "pw-in-uri-7" not in message + hint and Answer.seen == []


def test_nothing_listening_fails_before_any_ray_starts(tmp_path, capsys):
    path = tracked(tmp_path, tracking_uri=f"http://127.0.0.1:{free_port()}")
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert "does not answer" in err and "tracking_uri" in err and str(path) in err
    assert "started the embedded Ray" not in err and "Traceback" not in err


def test_no_uri_anywhere_and_a_scheme_mlflow_does_not_read(tmp_path):
    message, hint, _, field = refused(tracked(tmp_path))
    assert message.startswith("no tracking URI") and field == "tracking.mlflow"
    message, _, _, _ = refused(experiment(tmp_path / "b", tracking={
        "mlflow": {"tracking_uri": "htp://host:5000"}}))
    assert "is not a tracking URI MLflow reads" in message


def test_a_relative_folder_starts_at_the_experiment_file(tmp_path, monkeypatch):
    path = tracked(tmp_path, tracking_uri="mlruns")
    plan = prepare(load_experiment(path), RunOptions(), print)
    assert plan.config["tracking"]["tracking_uri"] == str(tmp_path / "exp" / "mlruns")
    (tmp_path / "exp" / "file").write_text("x")
    message, _, _, _ = refused(experiment(tmp_path / "c", tracking={
        "mlflow": {"tracking_uri": str(tmp_path / "exp" / "file")}}))
    assert "is a file; a file store is a folder" in message
    monkeypatch.setenv("MLFLOW_TRACKING_URI", str(tmp_path / "from-env"))
    plan = prepare(load_experiment(tracked(tmp_path / "d")), RunOptions(), print)
    assert plan.config["tracking"]["tracking_uri"] == str(tmp_path / "from-env")


def test_unknown_keys_in_the_section_are_refused(tmp_path):
    path = tracked(tmp_path, tracking_uri="mlruns", experimnet_name="x")
    assert main(["validate", str(path)]) != 0
    document = yaml.safe_load(path.read_text())
    assert document["tracking"]["mlflow"]["experimnet_name"] == "x"


def test_without_the_mlflow_client_the_error_names_the_pip_install(tmp_path):
    """A Python where mlflow cannot be found (a sitecustomize, first on the path, whose import
    hook says there is none): `orchestrate run` stops before starting anything and says what to
    install."""
    hidden = tmp_path / "hide"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(
        "import sys\n"
        "class NoMlflow:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'mlflow':\n"
        "            raise ModuleNotFoundError(\"No module named 'mlflow'\", name=name)\n"
        "sys.meta_path.insert(0, NoMlflow)\n")
    path = tracked(tmp_path, tracking_uri="mlruns")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "hide"))
    done = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "pip install mlflow-skinny" in done.stderr
    assert "pip install 'orchestrate-ray[mlflow]'" in done.stderr
    assert f"{path}:" in done.stderr and "tracking.mlflow" in done.stderr
    assert "Traceback" not in done.stderr and "embedded Ray" not in done.stderr


def test_a_port_that_does_not_speak_http_is_a_clear_error(tmp_path):
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def garble() -> None:
        connection, _ = listener.accept()
        connection.recv(1024)
        connection.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        connection.close()

    thread = threading.Thread(target=garble, daemon=True)
    thread.start()
    try:
        message, hint, _, field = refused(tracked(tmp_path, tracking_uri=f"http://127.0.0.1:{port}"))
    finally:
        listener.close()
    assert "does not answer" in message and field == "tracking.mlflow.tracking_uri"


def test_relative_stores_start_at_the_experiment_file_or_the_shell(tmp_path, monkeypatch):
    path = tracked(tmp_path, tracking_uri="sqlite:///db/mlflow.db")
    plan = prepare(load_experiment(path), RunOptions(), print)
    assert plan.config["tracking"]["tracking_uri"] == f"sqlite:///{tmp_path / 'exp' / 'db' / 'mlflow.db'}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "runs-here")
    plan = prepare(load_experiment(tracked(tmp_path / "e")), RunOptions(), print)
    assert plan.config["tracking"]["tracking_uri"] == str(tmp_path / "runs-here")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://ann:pw-from-env-3@127.0.0.1:9")
    message, hint, _, field = refused(tracked(tmp_path / "f"))
    assert "carries a password (MLFLOW_TRACKING_URI)" in message and field == "tracking.mlflow"
    assert "pw-from-env-3" not in message + hint


def test_mlflow_credentials_follow_no_redirect_and_no_proxy_for_loopback(tmp_path, monkeypatch):
    """The tracking check sends MLflow's credentials. A server answering 302 to another real
    listener: that listener gets nothing (urllib's default handler would copy `Authorization`
    there); a "proxy" named by every proxy variable never sees a request for a loopback server."""
    from tests.squatters import serving, set_proxy

    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok-redirected-4")
    with serving() as elsewhere, serving() as proxy, \
            serving(redirect_to=elsewhere.address) as mlflow:
        set_proxy(monkeypatch, proxy.address)
        message, _, _, field = refused(tracked(tmp_path, tracking_uri=mlflow.address))
        assert [h.get("Authorization") for _, _, h in mlflow.requests] == ["Bearer tok-redirected-4"]
        assert elsewhere.requests == []
        assert proxy.requests == []
    assert "302" in message and field == "tracking.mlflow.tracking_uri"
    assert "tok-redirected-4" not in message
