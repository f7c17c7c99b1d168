"""orchestrate render FILE: print exactly what would be handed to Ray, and nothing else."""
from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

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
        from ..render.cluster import render_cluster
        from ..state import State, cluster_key

        token_file = State.here().secrets.path(cluster_key(spec.name))
        config = render_cluster(spec, token_file=str(token_file)).config
        from .. import launch

        if launch.Feature.RESOURCE in launch.features(spec.provider):
            from ..launch.kuberay.manifests import ray_cluster

            return ray_cluster(config)
        return config
    from ..contract import CONFIG_ENV
    from ..render.experiment import render_job, ship

    if spec.own_cluster is not None:   # a RayJob (orchestrator.run.rayjob)
        from ..run import rayjob

        shipped = ship(spec)
        return rayjob.manifest(spec, render_job(spec, shipped), shipped)
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
    from ..errors import Problem, SpecError
    from ..render import service
    from ..serving.serve import checkpoint_of
    from ..state import State

    try:
        checkpoint = checkpoint_of(spec, State.here())
    except SpecError:
        checkpoint = f"<the {spec.checkpoint or 'given'} checkpoint of the model's latest run>"
    from .. import launch

    kuberay = spec.cluster is not None and \
        launch.Feature.SERVICE_RESOURCE in launch.features(spec.cluster.provider)
    store = spec.package_store
    package = {}
    if kuberay and store:   # a RayService: the package where the cluster fetches it
        from ..render.packages import uris

        package["package_uri"] = uris(store, None)["orchestrate"]
    application = service.render_application(spec, checkpoint=checkpoint,
                                             token_sha256=None if spec.auth == "none"
                                             else "<sha256 of the service's token>", **package)
    port = spec.http_port or service.DEFAULT_PORT
    if kuberay:
        from ..launch.kuberay.manifests import findings_at, ray_service
        from ..render.cluster import render_cluster

        assert spec.cluster is not None
        resource = ray_service(service.render_config(application,
                                                      service.http_options("0.0.0.0", port)),
                               render_cluster(spec.cluster, token_file="-").config)
        refused = findings_at(resource)
        if refused:
            raise SpecError([Problem(str(spec.path), line) for line in refused])
        return resource
    head = spec.cluster.document.get("provider", {}).get("head_ip") if spec.cluster else None
    return service.render_config(application, service.http_options(head or "127.0.0.1", port))


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (a RayJob's runtimeEnvYAML, a RayService's serveConfigV2) as the
    blocks they are, not as one escaped line."""


def _block(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text and not text.endswith((" ", "\t")) and \
        " \n" not in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _block)


def run(args: argparse.Namespace) -> int:
    from ..language import load_any

    document = render_document(load_any(args.path, here=False))   # shown, not launched
    if args.format == "json":
        emit_json(document)
    else:
        print(yaml.dump(json.loads(json.dumps(document)), Dumper=_Dumper, sort_keys=False,
                        default_flow_style=False, width=100), end="")
    return 0
