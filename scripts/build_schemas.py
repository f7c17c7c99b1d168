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

from orchestrator.providers import PROVIDERS, RAY_UP  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
import experiment_schema  # noqa: E402

NAME_PATTERN = "^[A-Za-z][A-Za-z0-9_-]{0,39}$"
# Provider types whose `ray up` fills in a node type's missing `resources` before validating, and
# the node_config key it reads them from: Ray's AWSNodeProvider.fillout_available_node_types_resources
# looks the InstanceType up in EC2 (ray/autoscaler/_private/aws/node_provider.py). GCP's only adds
# TPU labels to resources already written; the others fill in nothing.
RESOURCES_FILLED_FROM = {"aws": "InstanceType"}
NODE_GROUP_PROPS = {
    "instance_type": {"type": "string", "minLength": 1,
                      "description": "aws InstanceType, gcp machineType, azure vmSize; kuberay: "
                                     "the node.kubernetes.io/instance-type the pods run on"},
    "image": {"type": "string", "minLength": 1,
              "description": "aws ImageId, gcp sourceImage, azure image as "
                             "publisher:offer:sku:version; kuberay: the container image"},
    "cpus": {"type": "integer", "minimum": 0, "description": "CPU resource Ray advertises"},
    "gpus": {"type": "integer", "minimum": 0, "description": "GPU resource Ray advertises"},
    "gpu_type": {"type": "string", "minLength": 1,
                 "description": "gcp acceleratorType, e.g. nvidia-tesla-t4"},
    "disk_gb": {"type": "integer", "minimum": 10, "description": "boot disk size"},
    "memory": {"type": "string", "minLength": 1,
               "description": "kuberay: the pod's memory request and limit, e.g. 16Gi"},
    "resources": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
}

# Ray's descriptions that are wrong, or that say too little for this tool's users (editors show
# them on hover), by property path below the schema's `properties`.
DESCRIPTIONS = {
    ("max_workers",): (
        "the most worker nodes, beside the head, the cluster runs at once over all node types "
        "(each type's own max_workers limits it further); no smaller than the sum of the node "
        "types' min_workers. Ray's default on aws, gcp and azure: 2"),
    ("provider", "head_ip"): (
        "provider type local only: the on-prem head host's address (an IP address or a host name "
        "this machine resolves)"),
    ("provider", "worker_ips"): (
        "provider type local only: the on-prem worker hosts' addresses; the autoscaler starts Ray "
        "on those it needs"),
    ("provider", "region"): "aws: the region, e.g. us-east-1; gcp: the region, e.g. us-central1",
    ("provider", "availability_zone"): (
        "aws: the zones to launch in, comma-separated, e.g. us-east-1a,us-east-1b; gcp: the zone, "
        "e.g. us-central1-a; azure: the availability zone"),
    ("provider", "project_id"): "gcp: the project the instances are made in (its globally unique id)",
    ("provider", "namespace"): "kuberay: the Kubernetes namespace the RayCluster is made in",
    ("provider", "use_internal_ips"): (
        "reach the nodes at their private addresses: this machine must be inside or peered with "
        "their network"),
}
NODE_TYPE_DESCRIPTIONS = {
    "min_workers": "workers of this type kept running; `up` starts them",
    "max_workers": "the most workers of this type the autoscaler runs at once",
}


def ray_schema_path() -> Path:
    spec = importlib.util.find_spec("ray")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("ray is not installed: pip install 'orchestrate-ray[ray]'")
    return Path(list(spec.submodule_search_locations)[0]) / "autoscaler" / "ray-schema.json"


def ray_defaults() -> dict:
    """What Ray's defaults.yaml gives each provider that validation depends on: the head's node
    type and max_workers when the file has none, and the default node types (Ray's
    fillout_defaults lays the file's top-level keys over these before validating)."""
    import yaml

    root = ray_schema_path().parent
    found = {}
    for name in sorted(RAY_UP):   # KubeRay's clusters have no defaults.yaml: none laid over
        defaults = yaml.safe_load((root / name / "defaults.yaml").read_text())
        kept = {key: defaults[key] for key in ("head_node_type", "max_workers") if key in defaults}
        if defaults.get("available_node_types"):
            kept["available_node_types"] = {
                node: {"min_workers": spec.get("min_workers", 0)}
                for node, spec in defaults["available_node_types"].items()}
        found[name] = kept
    return found


def resources_rule() -> dict:
    """Ray's schema requires `resources` on every node type; `ray up` fills them in first for
    the providers in RESOURCES_FILLED_FROM, from the node_config key named there."""
    filled = sorted(RESOURCES_FILLED_FROM)
    when_filled = {
        "patternProperties": {".*": {
            "if": {"type": "object", "not": {"required": ["resources"]}},
            "then": {"properties": {"node_config": {
                "required": sorted(set(RESOURCES_FILLED_FROM.values())),
                "properties": {key: {"type": "string", "minLength": 1}
                               for key in sorted(set(RESOURCES_FILLED_FROM.values()))},
                "x-message": "without `resources`, ray up reads them from the node_config's "
                             + " / ".join(sorted(set(RESOURCES_FILLED_FROM.values())))}}}}}}
    otherwise = {"patternProperties": {".*": {"required": ["resources"]}}}
    return {
        "if": {"required": ["provider"], "properties": {"provider": {
            "required": ["type"], "properties": {"type": {"enum": filled}}}}},
        "then": {"properties": {"available_node_types": when_filled}},
        "else": {"properties": {"available_node_types": otherwise}},
    }


def legacy_rule(props: dict) -> dict:
    """Top-level keys Ray removed from its schema that some providers' `ray up` still reads
    (Provider.LEGACY_KEYS: the on-prem provider's `min_workers`): allowed for those providers
    only, so an editor agrees with `validate` (which says, for the others, what replaces them)."""
    kept: dict[str, list[str]] = {}
    for name, provider in sorted(PROVIDERS.items()):
        for key in provider.LEGACY_KEYS:
            kept.setdefault(key, []).append(name)
    rules = []
    for key, names in sorted(kept.items()):
        props[key] = {"type": "integer", "minimum": 0,
                      "description": f"provider type {' or '.join(names)} only: Ray's launcher "
                                     "still reads it at the top level"}
        rules.append({
            "if": {"required": ["provider"], "properties": {"provider": {
                "required": ["type"], "properties": {"type": {"not": {"enum": names}}}}}},
            "then": {"properties": {key: {
                "not": {}, "x-message": f"'{key}' at the top level is read by provider type "
                                        f"{' or '.join(names)} only"}}}})
    return {"allOf": rules}


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
        node_type["properties"][key] = {"type": "integer", "minimum": 0,
                                        "description": NODE_TYPE_DESCRIPTIONS[key]}
    for path, text in DESCRIPTIONS.items():
        where = props
        for key in path[:-1]:
            where = where[key]["properties"]
        where[path[-1]]["description"] = text
    node_type["required"] = [key for key in node_type["required"] if key != "resources"]
    schema["allOf"] = [*schema.get("allOf", []), resources_rule(), legacy_rule(props)]
    schema["x-ray-defaults"] = ray_defaults()
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
    props.update(orchestrate_props())
    return schema


# Where Ray Train can keep a run that every node writes to: the URIs pyarrow opens (gcs:// is
# gs://, abfs:// Azure's without TLS) or an absolute path (a mount every node has).
STORAGE_PATTERN = r"^((s3|gs|gcs|abfss?)://[^/]+(/.*)?|/.*)$"


def orchestrate_props() -> dict:
    """orchestrate's own top-level keys (orchestrator/cluster_settings.py): loading moves them
    under `metadata.orchestrate`, where Ray keeps them without reading them."""
    minutes = {"type": "number", "exclusiveMinimum": 0}
    return {
        "autostop": {
            "type": "object", "additionalProperties": False, "minProperties": 1,
            "anyOf": [{"required": ["idle_minutes"]}, {"required": ["max_uptime_minutes"]}],
            "x-message": "autostop needs idle_minutes or max_uptime_minutes (or both)",
            "description": "stop the cluster by itself (the head's watcher takes it down) when it "
                           "has been idle, or up, for this long",
            "properties": {
                "idle_minutes": dict(minutes, description=(
                    "minutes with no Ray job running or pending (and no SSH session with a "
                    "terminal on the head, unless ignore_ssh_sessions) before it stops")),
                "max_uptime_minutes": dict(minutes, description=(
                    "minutes after Ray started on the head when it stops, busy or not")),
                "ignore_ssh_sessions": {"type": "boolean", "default": False, "description": (
                    "an SSH session with a terminal on the head does not count as activity")},
            },
        },
        "archive": {
            "type": "string", "pattern": "^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?|file:///.*)$",
            "x-message": "expected s3://bucket/prefix or file:///absolute/folder",
            "description": "where the cluster's logs go before it is taken down: "
                           "s3://bucket/prefix or file:///absolute/folder",
        },
        "storage": {
            "type": "string", "pattern": STORAGE_PATTERN,
            "x-message": "expected s3://bucket/prefix, gs://, abfss:// or an absolute path "
                         "that every node mounts",
            "description": "storage every node reaches (s3://bucket/prefix, gs://bucket/prefix, "
                           "abfss://container@account.dfs.core.windows.net/prefix, or an "
                           "absolute path every node mounts, such as NFS): the "
                           "run_config.storage_path of the experiments run on this cluster "
                           "that name none; a cluster that can have several nodes needs one "
                           "of the two",
        },
        "host_price_per_hour": {
            "type": "number", "minimum": 0,
            "description": "what one on-prem host costs per hour, in USD (on-prem clusters only)",
        },
        "profiling": {
            "type": "boolean", "default": False,
            "description": "the dashboard's CPU flame graphs, stack traces and memory profiles "
                           "of running processes (`orchestrate profile`), for whoever holds the "
                           "cluster's token; changing it restarts Ray on the head",
        },
    }


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
