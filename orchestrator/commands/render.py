"""orchestrate render FILE: print exactly what would be handed to Ray, and nothing else."""
from __future__ import annotations

import json

import yaml

from ..output import add_format_argument, emit_json



def add_arguments(parser) -> None:
    parser.add_argument("path", metavar="FILE", help="a cluster or experiment YAML file")
    add_format_argument(parser)


def render_document(spec) -> dict:
    """What to show for a spec: the Ray cluster config, or the job plan."""
    if hasattr(spec, "provider"):
        from ..cluster.state import token_path
        from ..render.cluster import render_cluster

        return render_cluster(spec, token_file=str(token_path(spec.name)))
    from ..render.experiment import CONFIG_ENV, digest_directory, render_job

    plan = render_job(spec, working_dir_digest=digest_directory(spec.working_dir))
    shown = plan.as_dict()
    env = dict(shown["runtime_env"]["env_vars"])
    env[CONFIG_ENV] = "<the config below, as JSON>"
    shown["runtime_env"] = dict(shown["runtime_env"], env_vars=env)
    if spec.cluster is not None:
        shown["cluster"] = str(spec.cluster.path)
    return shown


def run(args) -> int:
    from ..spec import load_any

    document = render_document(load_any(args.path))
    if args.format == "json":
        emit_json(document)
    else:
        print(yaml.safe_dump(json.loads(json.dumps(document)), sort_keys=False,
                             default_flow_style=False, width=100), end="")
    return 0
