"""Regenerate schemas/*.schema.json: the cluster schema from the installed Ray's own.

The cluster spec *is* Ray's cluster-launcher dialect, so its schema is Ray's
`ray/autoscaler/ray-schema.json`, tightened where Ray is loose and extended with the
orchestrator's shorthand (`head`, `workers`). Run this after upgrading Ray; a test checks that
the committed file is what this script produces.

    python scripts/build_schemas.py          # rewrite the file
    python scripts/build_schemas.py --check  # exit 1 if the committed file is stale
"""
from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.providers import PROVIDERS  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
import experiment_schema  # noqa: E402

NAME_PATTERN = "^[A-Za-z][A-Za-z0-9_-]{0,39}$"
NODE_GROUP_PROPS = {
    "instance_type": {"type": "string", "minLength": 1,
                      "description": "aws InstanceType, gcp machineType, azure vmSize"},
    "image": {"type": "string", "minLength": 1,
              "description": "aws ImageId, gcp sourceImage, azure image as publisher:offer:sku:version"},
    "cpus": {"type": "integer", "minimum": 0, "description": "CPU resource Ray advertises"},
    "gpus": {"type": "integer", "minimum": 0, "description": "GPU resource Ray advertises"},
    "gpu_type": {"type": "string", "minLength": 1,
                 "description": "gcp acceleratorType, e.g. nvidia-tesla-t4"},
    "disk_gb": {"type": "integer", "minimum": 10, "description": "boot disk size"},
    "resources": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
}


def ray_schema_path() -> Path:
    spec = importlib.util.find_spec("ray")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("ray is not installed: pip install 'orchestrate[ray]'")
    return Path(list(spec.submodule_search_locations)[0]) / "autoscaler" / "ray-schema.json"


def build() -> dict:
    ray = json.loads(ray_schema_path().read_text())
    schema = copy.deepcopy(ray)
    schema["$id"] = "https://orchestrate.dev/schemas/cluster.schema.json"
    schema["title"] = "orchestrate cluster (Ray cluster launcher YAML)"
    schema["description"] = (
        "Ray's cluster-launcher schema (ray/autoscaler/ray-schema.json), with provider types "
        "limited to those orchestrate supports, non-negative worker counts, a shell-safe "
        "cluster name, and the optional head/workers shorthand."
    )
    props = schema["properties"]
    props["cluster_name"] = dict(props["cluster_name"], pattern=NAME_PATTERN, **{
        "x-message": "expected a name of 1-40 letters, digits, '-' or '_' starting with a letter "
                     "(it is used in shell commands and cloud resource names)"})
    props["provider"]["properties"]["type"] = {
        "type": "string", "enum": sorted(PROVIDERS), "description": "where the nodes run"}
    node_type = props["available_node_types"]["patternProperties"][".*"]
    for key in ("min_workers", "max_workers"):
        node_type["properties"][key] = {"type": "integer", "minimum": 0}
    head = {"type": "object", "additionalProperties": False, "properties": NODE_GROUP_PROPS,
            "description": "shorthand for the head node type"}
    worker = copy.deepcopy(head)
    worker["description"] = "shorthand for one worker node type"
    worker["properties"].update({
        "min_workers": {"type": "integer", "minimum": 0},
        "max_workers": {"type": "integer", "minimum": 0},
        "spot": {"type": "boolean", "description": "spot / preemptible instances"},
    })
    props["head"] = head
    props["workers"] = {
        "type": "object", "minProperties": 1, "additionalProperties": False,
        "patternProperties": {"^[A-Za-z][A-Za-z0-9_-]{0,39}$": worker},
        "description": "shorthand: worker node types by name",
    }
    return schema


def main() -> int:
    stale = 0
    for name, schema in (("cluster", build()), ("experiment", experiment_schema.build())):
        target = ROOT / "schemas" / f"{name}.schema.json"
        text = json.dumps(schema, indent=2, sort_keys=True) + "\n"
        if "--check" not in sys.argv:
            target.write_text(text)
        elif not target.exists() or target.read_text() != text:
            print(f"{target} is stale: run python scripts/build_schemas.py", file=sys.stderr)
            stale = 1
    return stale


if __name__ == "__main__":
    sys.exit(main())
