"""`tracking.mlflow` checked before a tracked experiment is submitted: a URI that cannot work
fails here, naming the field, rather than minutes later inside the job.

    check(spec, config, embedded=..., progress=...)   # SpecError, or nothing

A server is asked what MLflow's client would ask first (the experiment by name) with the
credentials the job will get; a folder must be one this machine can write (for the embedded Ray;
a cluster's folder is the cluster's). Databases and Databricks are left to MLflow.
"""
from __future__ import annotations

import base64
import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from ..contract import JobConfig
from ..errors import Problem, SpecError
from ..language.experiment import ExperimentSpec
from ..util import http as http_util
from ..util.ports import is_loopback
from ..workload.tracking import MISSING, is_file_store, public_uri

FIELD = ("tracking", "mlflow", "tracking_uri")
LEFT_TO_MLFLOW = ("databricks", "databricks-uc", "uc", "sqlite", "postgresql", "mysql", "mssql")
TIMEOUT = 10.0


def check(spec: ExperimentSpec, config: JobConfig, *, embedded: bool,
          progress: Callable[[str], None], environ: Mapping[str, str] | None = None) -> None:
    """SpecError when the run could not be tracked as its experiment says."""
    section = config.get("tracking")
    if not section:
        return
    environ = os.environ if environ is None else environ
    uri = section["tracking_uri"]
    problem = _problem(uri, section["experiment_name"], embedded=embedded, environ=environ,
                       progress=progress)
    # the embedded Ray's jobs run with this Python's packages
    if problem is None and embedded and not _installed("mlflow"):
        import sys

        problem = MISSING.format(python=sys.executable), None
    if problem is not None:
        message, hint = problem
        field = FIELD if (spec.document.get("tracking") or {}).get("mlflow", {}).get(
            "tracking_uri") else FIELD[:2]
        raise SpecError([spec.source.problem(field, message, hint) if spec.source
                         else Problem(str(spec.path), message, field=".".join(field), hint=hint)])


def _installed(package: str) -> bool:
    """Whether `package` is there to import (found, not imported: MLflow takes a second)."""
    import importlib.util

    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def _problem(uri: str, experiment: str, *, embedded: bool, environ: Mapping[str, str],
             progress: Callable[[str], None]) -> tuple[str, str | None] | None:
    if not uri:
        return ("no tracking URI: tracking.mlflow.tracking_uri is not set, nor is "
                "MLFLOW_TRACKING_URI", "give a server's URL (http://host:5000) or a folder")
    scheme = urllib.parse.urlsplit(uri).scheme.lower()   # a password was refused by render
    if is_file_store(uri):
        if embedded:
            return _folder_problem(uri)
        progress(f"warning: the tracking store {uri} is a folder on the cluster's nodes (each "
                 f"run's on the node its Train controller runs on); a tracking server is what a "
                 f"cluster shares")
        return None
    if scheme in LEFT_TO_MLFLOW:
        return None
    if scheme not in ("http", "https"):
        return (f"{public_uri(uri)!r} is not a tracking URI MLflow reads",
                "a server's http(s):// URL, a folder, or file:///folder")
    host = urllib.parse.urlsplit(uri).hostname or ""
    if not embedded and (host == "localhost" or is_loopback(host)):
        progress(f"warning: {public_uri(uri)} is loopback: on the cluster each node reaches "
                 f"itself there, not this machine")
    return _server_problem(uri, experiment, embedded=embedded, environ=environ, progress=progress)


def _folder_problem(uri: str) -> tuple[str, str | None] | None:
    path = Path(urllib.parse.urlsplit(uri).path if uri.startswith("file:") else uri)
    if path.exists() and not path.is_dir():
        return f"{path} is a file; a file store is a folder", None
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not (existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)):
        return (f"cannot make the file store {path}: {existing} is not a folder this user can "
                f"write", None)
    return None


def _server_problem(uri: str, experiment: str, *, embedded: bool, environ: Mapping[str, str],
                    progress: Callable[[str], None]) -> tuple[str, str | None] | None:
    shown = public_uri(uri)
    query = urllib.parse.urlencode({"experiment_name": experiment})
    request = urllib.request.Request(
        f"{shown.rstrip('/')}/api/2.0/mlflow/experiments/get-by-name?{query}",
        headers=_credentials(uri, environ))
    try:
        with http_util.opener_for(request.full_url).open(request, timeout=TIMEOUT):
            return None
    except urllib.error.HTTPError as exc:
        code, body = exc.code, exc.read()[:4096]
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        reason = str(getattr(exc, "reason", exc)) or type(exc).__name__
        if not embedded:  # the cluster may reach what this machine cannot
            progress(f"warning: the tracking server {shown} does not answer from here "
                     f"({reason}); the job on the cluster will try it")
            return None
        return (f"the tracking server {shown} does not answer: {reason}",
                "is `mlflow server` running there? (the URL is tracking.mlflow.tracking_uri or "
                "MLFLOW_TRACKING_URI)")
    if code in (401, 403):
        return (f"the tracking server {shown} refused the credentials (HTTP {code})",
                "set MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD, where you run orchestrate")
    if code == 404 and _error_code(body) == "RESOURCE_DOES_NOT_EXIST":
        return None  # an MLflow server without that experiment yet: the job creates it
    return (f"{shown} answers HTTP {code} to MLflow's API: not an MLflow tracking server there",
            "the URL of `mlflow server` (its root, without /api or #/...)")


def _credentials(uri: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The header MLflow's client would send: a token, else a user and password (from the
    environment, or written into the URI)."""
    if environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {environ['MLFLOW_TRACKING_TOKEN']}"}
    parts = urllib.parse.urlsplit(uri)
    user = environ.get("MLFLOW_TRACKING_USERNAME") or parts.username
    password = environ.get("MLFLOW_TRACKING_PASSWORD") or parts.password
    if user and password:
        pair = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {pair}"}
    return {}


def _error_code(body: bytes) -> str | None:
    try:
        found = json.loads(body)
    except ValueError:
        return None
    return found.get("error_code") if isinstance(found, dict) else None
