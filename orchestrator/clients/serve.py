"""Ray Serve's REST API on an Endpoint (`/api/serve/applications/`, behind the token), beside
the jobs client (`client.JobsClient`); failures become ServeError naming the endpoint.

    serve = ServeClient(endpoint)
    details = serve.details()                     # GET: every application, the proxy options
    serve.put(details, http_options, apps)        # PUT: declarative over every application
    serve.wait(name, progress)                    # until RUNNING (DEPLOY_FAILED: ServeError)
    serve.wait(name, progress, gone=True)         # until Serve no longer lists it
    serve.shutdown()                              # DELETE: Serve and all its applications
"""
from __future__ import annotations

from typing import Any

from ..errors import ServeError
from ..reach.endpoint import Endpoint
from ..util import http
from ..util.progress import Progress
from ..util.waiting import poll

API = "/api/serve/applications/"
DEPLOY_TIMEOUT = 600.0
# What Ray's proxy raises when its port is bound already (serve/_private/http_util.py,
# `start_asgi_http_server`); the dashboard answers the PUT with it.
BIND_FAILED = "Failed to bind to address"


class PortTaken(ServeError):
    """Serve's proxy could not bind its port: another process holds it."""


class ServeClient:
    def __init__(self, endpoint: Endpoint, *, timeout: float = DEPLOY_TIMEOUT,
                 interval: float = 1.0) -> None:
        self.endpoint = endpoint
        self.timeout = timeout      # how long `wait` waits
        self.interval = interval    # between `wait`'s questions

    def details(self) -> dict[str, Any]:
        """What Serve reports: `applications` by name, `http_options`, `proxy_location`."""
        try:
            found = http.get_json(self.endpoint.address, API, self.endpoint.token, timeout=30)
        except http.HttpError as exc:
            raise ServeError(f"{self.endpoint.label}: the Serve API did not answer: {exc}") from None
        return found if isinstance(found, dict) else {}

    def application(self, name: str) -> dict[str, Any] | None:
        app = (self.details().get("applications") or {}).get(name)
        return app if isinstance(app, dict) else None

    def put(self, details: dict[str, Any], http_options: dict[str, Any],
            apps: list[dict[str, Any]]) -> None:
        """PUT every application; a running Serve keeps its proxy settings (they cannot
        change), so `details` (what it reported) gives the proxy location."""
        body = {"proxy_location": details.get("proxy_location") or "HeadOnly",
                "http_options": http_options, "applications": apps}
        try:
            http.send_json(self.endpoint.address, API, self.endpoint.token, body, method="PUT",
                           timeout=60)
        except http.HttpError as exc:
            kind = PortTaken if BIND_FAILED in str(exc) else ServeError
            raise kind(f"{self.endpoint.label}: Serve refused the applications: "
                       f"{exc}") from None

    def shutdown(self) -> None:
        """Serve stops, with every application (Ray's `serve.shutdown`); a Serve whose proxy
        failed to start keeps the options it was started with until then."""
        try:
            http.send_json(self.endpoint.address, API, self.endpoint.token, None,
                           method="DELETE", timeout=120)
        except http.HttpError as exc:
            raise ServeError(f"{self.endpoint.label}: Serve did not shut down: {exc}") from None

    def upload_package(self) -> str:
        """orchestrate's package in the cluster's GCS, as `ray job submit` uploads py_modules
        (only when the cluster does not hold this content yet); its gcs:// URI (Serve's REST
        API takes only remote URIs)."""
        from ..render.experiment import package_dir
        from .jobs import submission_client

        env: dict[str, Any] = {"py_modules": [package_dir()]}
        try:
            client = submission_client(self.endpoint.address, self.endpoint.headers or None)
            client._upload_py_modules_if_needed(env)  # the job client's own upload (no public API)
        except Exception as exc:  # noqa: BLE001 - Ray raises RuntimeError, requests' errors, ...
            raise ServeError(f"{self.endpoint.label}: uploading orchestrate's package failed: "
                             f"{str(exc).splitlines()[0][:300]}") from None
        return str(env["py_modules"][0])

    def upload_working_dir(self, folder: str, excludes: list[str]) -> str:
        """An experiment's working_dir in the cluster's GCS, as `ray job submit` uploads it;
        its gcs:// URI (the user's own demo app is imported from it)."""
        from .jobs import submission_client

        env: dict[str, Any] = {"working_dir": folder, "excludes": excludes}
        try:
            client = submission_client(self.endpoint.address, self.endpoint.headers or None)
            client._upload_working_dir_if_needed(env)  # the job client's own upload
        except Exception as exc:  # noqa: BLE001 - as upload_package
            raise ServeError(f"{self.endpoint.label}: uploading the working_dir {folder} "
                             f"failed: {str(exc).splitlines()[0][:300]}") from None
        return str(env["working_dir"])

    def wait(self, name: str, progress: Progress, *, gone: bool = False) -> str:
        """Until application `name` is RUNNING (each new status said once), or with `gone`
        until Serve no longer lists it ("DELETED"); ServeError when it failed to deploy or the
        timeout passed."""
        shown: list[str] = []

        def settled() -> str | None:
            app = self.application(name)
            if gone:
                return "DELETED" if app is None else None
            status = str((app or {}).get("status") or "NOT_STARTED")
            if not shown or shown[-1] != status:
                shown.append(status)
                progress(f"  {name}: {status}")
            if status == "DEPLOY_FAILED":
                raise ServeError(f"{name} failed to deploy: {failure(app or {})}",
                                 hint="the replica's log: the Serve logs in the dashboard")
            return status if status == "RUNNING" else None

        status = poll(settled, timeout=self.timeout, interval=self.interval)
        if status is None:
            raise ServeError(f"{name} was not {'removed' if gone else 'RUNNING'} after "
                             f"{self.timeout:.0f} s")
        return status


def running_configs(details: dict[str, Any]) -> list[dict[str, Any]]:
    """Every application's config as Serve holds it (what to send back to keep it)."""
    apps = (details.get("applications") or {}).values()
    return [app["deployed_app_config"] for app in apps if app.get("deployed_app_config")]


def routes(details: dict[str, Any]) -> list[dict[str, Any]]:
    """Every application's name and route, also those deployed with `serve.run`, which Serve
    reports without a config (the PUT leaves them alone, but their routes are taken)."""
    return [{"name": name, "route_prefix": app.get("route_prefix")}
            for name, app in (details.get("applications") or {}).items()]


def failure(app: dict[str, Any]) -> str:
    """Why an application failed to deploy: its first deployment's message, else its own."""
    for deployment in (app.get("deployments") or {}).values():
        if deployment.get("message"):
            return str(deployment["message"]).strip().splitlines()[-1][:500]
    return str(app.get("message") or "no message").strip().splitlines()[-1][:500]
