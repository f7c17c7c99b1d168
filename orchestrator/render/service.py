"""ServiceSpec -> Ray Serve's own config (the shape `serve build` writes and the dashboard's
`PUT /api/serve/applications/` takes), so it can be read with `orchestrate render` and reused
in a KubeRay RayService.

Pure: the checkpoint (resolved by the caller), the token's hash and the URI of orchestrate's
package on the cluster (uploaded by the caller) come in as arguments. `merge` puts one
application into the applications already running, leaving the others as they are.
"""
from __future__ import annotations

from typing import Any

from ..contract import SERVE_DEPLOYMENT, SERVE_IMPORT_PATH, ServeUserConfig
from ..language.service import ServiceSpec

DEFAULT_PORT = 8000
PACKAGE_PLACEHOLDER = "<orchestrate's package, uploaded by `orchestrate serve`>"
WORKING_DIR_PLACEHOLDER = "<the experiment's working_dir, uploaded by `orchestrate serve`>"


def user_config(spec: ServiceSpec, checkpoint: str, token_sha256: str | None,
                demo_sha256: str | None = None) -> ServeUserConfig:
    batching = spec.document.get("batching") or {}
    gpus = float((spec.document.get("resources_per_replica") or {}).get("gpus", 0))
    # from the file, not from the hash: a hash lost on the way fails closed in the replica
    config: ServeUserConfig = {
        "checkpoint": checkpoint, "auth": spec.auth,
        "token_sha256": token_sha256,
        "max_batch_size": int(batching.get("max_batch_size", 1)),
        "batch_wait_timeout_s": float(batching.get("batch_wait_timeout_s", 0.0)),
        "use_gpu": gpus > 0}
    if spec.demo:   # only when asked: a service without it renders as before
        config["demo"] = True
        if demo_sha256:   # the page's own secret (not the token): its cookie (`demo_page`)
            config["demo_sha256"] = demo_sha256
        if spec.demo_app:   # the user's own Blocks, from the working_dir the replica runs in
            config["demo_app"] = spec.demo_app
    return config


def render_application(spec: ServiceSpec, *, checkpoint: str, token_sha256: str | None,
                       package_uri: str = PACKAGE_PLACEHOLDER,
                       demo_sha256: str | None = None,
                       working_dir_uri: str = WORKING_DIR_PLACEHOLDER) -> dict[str, Any]:
    data = spec.document
    resources = data.get("resources_per_replica") or {}
    deployment: dict[str, Any] = {
        "name": SERVE_DEPLOYMENT,
        "ray_actor_options": {"num_cpus": resources.get("cpus", 1),
                              "num_gpus": resources.get("gpus", 0)},
        "user_config": user_config(spec, checkpoint, token_sha256, demo_sha256),
        # a replica that must restart (new resources) is replaced by a new one first
        "max_surge_percent": 100,
    }
    if "max_ongoing_requests" in data:
        deployment["max_ongoing_requests"] = data["max_ongoing_requests"]
    if data.get("autoscaling"):
        deployment["autoscaling_config"] = dict(data["autoscaling"])
    else:
        deployment["num_replicas"] = data.get("replicas", 1)
    runtime_env: dict[str, Any] = {"py_modules": [package_uri],
                                   "env_vars": {"RAY_USAGE_STATS_ENABLED": "0"}}
    if spec.demo_app:   # `demo: {app}`: the user's module is imported from the working_dir
        runtime_env["working_dir"] = working_dir_uri
    return {"name": spec.name, "route_prefix": spec.route_prefix,
            "import_path": SERVE_IMPORT_PATH, "args": {}, "runtime_env": runtime_env,
            "deployments": [deployment]}


def http_options(host: str, port: int) -> dict[str, Any]:
    return {"host": host, "port": port}


def render_config(application: dict[str, Any], http: dict[str, Any]) -> dict[str, Any]:
    """A whole Serve config of one application (what `orchestrate render` shows)."""
    return {"proxy_location": "HeadOnly", "http_options": http, "applications": [application]}


def merge(running: list[dict[str, Any]], application: dict[str, Any]) -> list[dict[str, Any]]:
    """The applications to PUT: the running ones as they are, `application` added or in place
    of the one of its name (the PUT is declarative over all of them)."""
    others = [a for a in running if a.get("name") != application["name"]]
    return [*others, application]


def without(running: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [a for a in running if a.get("name") != name]


def route_owner(running: list[dict[str, Any]], application: dict[str, Any]) -> str | None:
    """The other application that already serves this route prefix, if any."""
    for other in running:
        if other.get("name") != application["name"] and \
                other.get("route_prefix") == application["route_prefix"]:
            return str(other.get("name"))
    return None
