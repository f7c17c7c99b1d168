"""orchestrate render FILE: print exactly what would be handed to Ray, and nothing else."""
from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

from .. import providers
from ..language.cluster import ClusterSpec
from ..language.experiment import ExperimentSpec
from ..language.service import ServiceSpec
from ..output import add_format_argument, emit_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="FILE", help="a cluster, experiment or service YAML file")
    add_format_argument(parser)


def render_document(spec: ClusterSpec | ExperimentSpec | ServiceSpec) -> dict[str, Any]:
    """What to show for a spec: the Ray cluster config (on Kubernetes, the RayCluster KubeRay
    gets), the job plan, or the Serve config."""
    if isinstance(spec, ServiceSpec):
        return render_service(spec)
    if isinstance(spec, ClusterSpec):
        from ..render.cluster import KUBERAY, render_cluster
        from ..state import State, cluster_key

        token_file = State.here().secrets.path(cluster_key(spec.name))
        config = render_cluster(spec, token_file=str(token_file)).config
        if providers.get(spec.provider).LAUNCH == KUBERAY:
            from ..render.kuberay import ray_cluster

            return ray_cluster(config)
        return config
    from ..contract import CONFIG_ENV
    from ..render.experiment import render_job, ship

    plan = render_job(spec, ship(spec))
    shown = plan.as_dict()
    env = dict(shown["runtime_env"]["env_vars"])
    env[CONFIG_ENV] = "<the config below, as JSON>"
    shown["runtime_env"] = dict(shown["runtime_env"], env_vars=env)
    if plan.secrets:   # their values are read at submission and never shown
        shown["secrets"] = {name: f"<${source} at submission, shipped apart from env_vars>"
                            for name, source in plan.secrets.items()}
    if spec.cluster is not None:
        shown["cluster"] = str(spec.cluster.path)
    return shown


def render_service(spec: ServiceSpec) -> dict[str, Any]:
    """Serve's config for the service: the checkpoint it would serve now (if this machine knows
    one), the token's hash and orchestrate's package shown as what they stand for."""
    from ..errors import SpecError
    from ..jobs.serve import checkpoint_of
    from ..render import service
    from ..state import State

    try:
        checkpoint = checkpoint_of(spec, State.here())
    except SpecError:
        checkpoint = f"<the {spec.checkpoint or 'given'} checkpoint of the model's latest run>"
    application = service.render_application(spec, checkpoint=checkpoint,
                                             token_sha256=None if spec.document.get("auth") == "none"
                                             else "<sha256 of the service's token>")
    head = spec.cluster.document.get("provider", {}).get("head_ip") if spec.cluster else None
    port = spec.document.get("http_port", service.DEFAULT_PORT)
    return service.render_config(application, service.http_options(head or "127.0.0.1", port))


def run(args: argparse.Namespace) -> int:
    from ..language import load_any

    document = render_document(load_any(args.path, here=False))   # shown, not launched
    if args.format == "json":
        emit_json(document)
    else:
        print(yaml.safe_dump(json.loads(json.dumps(document)), sort_keys=False,
                             default_flow_style=False, width=100), end="")
    return 0
