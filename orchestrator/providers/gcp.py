"""`gcp`: what orchestrate knows about Ray's GCP provider (zone within region, resource names,
the shorthand's Compute Engine node config, what forces a new cluster) and its preflight through
google-cloud-compute: credentials, project, region and zone, machine and accelerator types,
source images, regional CPU/GPU quotas.

Credentials come from Application Default Credentials (google.auth.default). The Compute Engine
endpoint can be changed with ORCHESTRATE_GCP_ENDPOINT (e.g. a private endpoint, or the tests'
loopback fake).
"""
from __future__ import annotations

import os
import re
from typing import Any

from ..errors import Problem, require
from ..yamlload import Document
from . import cloud
from .base import (
    FAIL,
    OK,
    CheckResult,
    Checks,
    ClusterView,
    Config,
    FieldPath,
    NodePrice,
    compare_quota,
    listing,
    node_path,
    node_types,
    sdk_message,
    suggest,
    worst_case,
)

NAME = "gcp"
EXTRA = "gcp"
# Provider fields Ray's GCP provider reads.
KEYS = ("region", "availability_zone", "project_id", "gcp_credentials")
REQUIRED = ("region", "availability_zone", "project_id")
REPLACE_FIELDS = ("provider.region", "provider.availability_zone", "provider.project_id")
LEGACY_KEYS = cloud.LEGACY_KEYS
LAUNCH = cloud.LAUNCH
RAY_REPLACES = cloud.RAY_REPLACES
SCALING_FIELDS = cloud.SCALING_FIELDS
FIXED_HOSTS = cloud.FIXED_HOSTS
INSTANCE_TYPED = cloud.INSTANCE_TYPED
DEFAULT_START = cloud.DEFAULT_START
dashboard_host = cloud.dashboard_host
tls_names = cloud.tls_names
head_address = cloud.head_address
expected_nodes = cloud.expected_nodes
not_joined = cloud.not_joined
launcher_env = cloud.launcher_env
after_down = cloud.after_down
price_source = cloud.price_source

# GPUs that come with a machine type (A2, G2), priced apart in the catalog (gcp-gpus.csv).
_BUILT_IN_GPUS = re.compile(r"a2-highgpu-(?P<a100>\d+)g|g2-standard-(?P<g2>\d+)")
_G2_L4S = {"4": 1, "8": 1, "12": 1, "16": 1, "32": 1, "24": 2, "48": 4, "96": 8}


def price_layout(config: Config) -> Config:
    return cloud.price_layout(config, NAME)


def is_spot(node_config: Config) -> bool:
    """Ray's GCP examples write `scheduling` as a list of dicts, the Compute API as a dict."""
    scheduling = node_config.get("scheduling") or {}
    entries = scheduling if isinstance(scheduling, list) else [scheduling]
    return any(isinstance(entry, dict) and (
        entry.get("preemptible") is True
        or str(entry.get("provisioningModel", "")).upper() == "SPOT") for entry in entries)


def _accelerators(machine: str, node_config: Config) -> list[tuple[str, int, str]]:
    """(accelerator type, count, field path inside node_config) of every GPU the node carries."""
    found = []
    built_in = _BUILT_IN_GPUS.fullmatch(machine)
    if built_in and built_in.group("a100"):
        found.append(("nvidia-tesla-a100", int(built_in.group("a100")), "machineType"))
    elif built_in and built_in.group("g2") in _G2_L4S:
        found.append(("nvidia-l4", _G2_L4S[built_in.group("g2")], "machineType"))
    for index, entry in enumerate(node_config.get("guestAccelerators") or []):
        if isinstance(entry, dict):
            kind = str(entry.get("acceleratorType") or "").rstrip("/").rsplit("/", 1)[-1]
            found.append((kind, int(entry.get("acceleratorCount") or 1),
                          f"guestAccelerators.{index}.acceleratorType"))
    return found


def _priced(config: Config, name: str, node_type: Config) -> tuple[NodePrice, str | None]:
    """The machine type's price plus its GPUs' (attached in guestAccelerators, or built into
    an A2/G2 machine type), in the provider's zone when spot."""
    from . import prices

    node_config = node_type.get("node_config") or {}
    provider = config.get("provider") or {}
    region = str(provider.get("region") or "")
    zone = str(provider.get("availability_zone") or "") or None
    spot = is_spot(node_config)
    machine, warning = cloud.priced(NAME, name, node_type, ("machineType",), region, zone, spot)
    hourly = machine.hourly
    for kind, count, field in _accelerators(machine.instance, node_config):
        gpu = prices.accelerator(NAME, kind, count, region, zone, spot)
        if gpu is None:
            hourly = None
            path = ".".join(str(part) for part in node_path(name, *field.split(".")))
            warning = warning or (f"{path}: {'spot ' if spot else ''}{count} x {kind} in {region} "
                                  "is not in the price catalog; its price is unknown"
                                  + prices.subset_hint(NAME))
        elif hourly is not None:
            hourly += gpu
    return NodePrice(name, machine.instance, region, spot, hourly), warning


def node_price(config: Config, name: str, node_type: Config) -> NodePrice:
    return _priced(config, name, node_type)[0]


def price_warning(config: Config, name: str, node_type: Config) -> str | None:
    return _priced(config, name, node_type)[1]
DEFAULT_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cpu"


def problems(doc: Document, data: Config) -> list[Problem]:
    provider = data.get("provider", {})
    found = []
    region, zone = provider.get("region"), provider.get("availability_zone")
    if region and zone and not str(zone).startswith(f"{region}-"):
        found.append(doc.problem(("provider", "availability_zone"),
                                 f"zone '{zone}' is not in region '{region}'",
                                 f"GCP zones are named after their region, e.g. {region}-a"))
    name = str(data.get("cluster_name", ""))
    if name and (name.lower() != name or "_" in name):
        found.append(doc.problem(("cluster_name",), f"'{name}' is not a valid GCP resource name",
                                 "on gcp use lowercase letters, digits and '-'"))
    return found + _accelerator_problems(doc, data)


def _accelerator_problems(doc: Document, data: Config) -> list[Problem]:
    """`guestAccelerators` entries whose `acceleratorCount` is not a positive whole number (the
    prices, the quota check and GCP itself count on it)."""
    found = []
    types = data.get("available_node_types")
    for name, node_type in (types.items() if isinstance(types, dict) else ()):
        node_config = node_type.get("node_config") if isinstance(node_type, dict) else None
        entries = node_config.get("guestAccelerators") if isinstance(node_config, dict) else None
        for index, entry in enumerate(entries if isinstance(entries, list) else ()):
            if not isinstance(entry, dict) or "acceleratorCount" not in entry:
                continue
            count = entry["acceleratorCount"]
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                found.append(doc.problem(
                    node_path(str(name), "guestAccelerators", index, "acceleratorCount"),
                    f"acceleratorCount must be a positive whole number, not {count!r}",
                    "the number of GPUs of that type on each node, e.g. acceleratorCount: 1"))
    return found


def group_problems(doc: Document, path: FieldPath, group: Config) -> list[Problem]:
    found = cloud.group_problems(doc, path, group, NAME, gpu_type=True)
    if group.get("gpus") and not group.get("gpu_type"):
        found.append(doc.problem(path + ("gpus",), "on gcp, gpus needs gpu_type "
                                 "(e.g. nvidia-tesla-t4) to attach accelerators"))
    return found


def node_config(group: Config) -> Config:
    config: Config = {
        "machineType": group["instance_type"],
        "disks": [{"boot": True, "autoDelete": True, "type": "PERSISTENT", "initializeParams": {
            "diskSizeGb": group.get("disk_gb", 50),
            "sourceImage": group.get("image", DEFAULT_IMAGE)}}],
    }
    if group.get("gpus") and group.get("gpu_type"):
        config["guestAccelerators"] = [
            {"acceleratorType": group["gpu_type"], "acceleratorCount": group["gpus"]}]
        config["scheduling"] = [{"onHostMaintenance": "TERMINATE"}]
    if group.get("spot"):
        config.setdefault("scheduling", [{}])[0]["preemptible"] = True
    return config


def check(spec: ClusterView) -> list[CheckResult]:
    return _checks(spec) + head_credentials(spec) + cloud.archive_note(spec) + \
        cloud.node_types_note(spec, NAME)


# Ray's default head account and its roles (ray/autoscaler/_private/gcp/config.py).
DEFAULT_HEAD_ACCOUNT = "ray-autoscaler-sa-v1"
COMPUTE_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",
                  "https://www.googleapis.com/auth/compute")


def head_credentials(spec: ClusterView) -> list[CheckResult]:
    """Autostop runs Ray's node provider on the head as the head's service account: Ray's own
    has roles/compute.admin; one the file names is not asked of IAM here, so it gets a warning
    naming what it needs."""
    if not cloud.autostop_wanted(spec):
        return []
    checks = Checks(spec)
    provider = spec.document.get("provider") or {}
    project = provider.get("project_id") or "?"
    stops = provider.get("cache_stopped_nodes", False)   # Ray's GCP default: delete
    needs = "compute.instances.list, " + ("compute.instances.stop and " if stops else "") + \
        "compute.instances.delete"
    head, config = cloud.head_node_config(spec)
    accounts = [a for a in config.get("serviceAccounts") or [] if isinstance(a, dict)]
    wanted = "autostop takes the cluster down from its head as the head's service account"
    if not accounts:
        email = f"{DEFAULT_HEAD_ACCOUNT}@{project}.iam.gserviceaccount.com"
        checks.ok(cloud.HEAD_CREDENTIALS, f"{wanted}, Ray's default {email}: Ray grants it "
                  f"roles/compute.admin ({needs}) with the cloud-platform scope",
                  cloud.AUTOSTOP_PATH)
        return checks.results
    email, scopes = accounts[0].get("email", "?"), accounts[0].get("scopes") or []
    path = node_path(head, "serviceAccounts")
    if not any(scope in COMPUTE_SCOPES for scope in scopes):
        checks.fail(cloud.HEAD_CREDENTIALS, f"{wanted} {email}, whose scopes "
                    f"({listing(scopes)}) do not reach Compute Engine: the cluster would stay up",
                    f"add the scope {COMPUTE_SCOPES[0]}", path)
    else:
        checks.warn(cloud.HEAD_CREDENTIALS, f"{wanted} {email}, whose roles are not checked "
                    f"here: it needs {needs} in project {project}",
                    f"grant {email} roles/compute.instanceAdmin.v1 on project {project}, or drop "
                    "serviceAccounts to have Ray's default", path)
    return checks.results


SCOPE = "https://www.googleapis.com/auth/cloud-platform"
TIMEOUT = 20.0
CREDENTIALS_HINT = ("run `gcloud auth application-default login`, or set "
                    "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file")
Needs = dict[str, dict[tuple[str, str], int]]  # node type -> {(prefix, quota metric): amount}
IMAGE = re.compile(r"(?:^|/)projects/(?P<project>[^/]+)/global/images/(?P<family>family/)?(?P<name>[^/]+)$")


def _basename(value: str) -> str:
    return str(value).rstrip("/").rsplit("/", 1)[-1]


def _auth() -> tuple[str, str, str | None, Any, Any]:
    """(status, detail, hint, credentials, project) from Application Default Credentials."""
    require("google.cloud.compute_v1", "google-cloud-compute", EXTRA)
    import google.auth
    from google.auth import exceptions
    from google.auth.transport.requests import Request
    creds: Any  # google-auth's Credentials, partly typed
    try:
        creds, project = google.auth.default(scopes=[SCOPE])
        creds.refresh(Request())
    except exceptions.DefaultCredentialsError:
        return FAIL, "no Google Cloud credentials found", CREDENTIALS_HINT, None, None
    except exceptions.GoogleAuthError as exc:
        return FAIL, f"the credentials were refused: {sdk_message(exc)}", CREDENTIALS_HINT, None, None
    who = getattr(creds, "service_account_email", None) or "application default credentials"
    return OK, f"{who}" + (f" (default project {project})" if project else ""), None, creds, project


def credentials() -> CheckResult:
    status, detail, hint, _, _ = _auth()
    return CheckResult("gcp credentials", status, detail, hint)


class _Compute:
    """The Compute Engine clients, built lazily on one set of credentials and endpoint."""

    def __init__(self, creds: Any) -> None:
        self._module = require("google.cloud.compute_v1", "google-cloud-compute", EXTRA)
        self._creds = creds
        endpoint = os.environ.get("ORCHESTRATE_GCP_ENDPOINT")
        self._options = {"api_endpoint": endpoint} if endpoint else None
        self._clients: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._clients:
            cls = getattr(self._module, name)
            self._clients[name] = cls(credentials=self._creds, client_options=self._options)
        return self._clients[name]


def _checks(spec: ClusterView) -> list[CheckResult]:
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth
    checks = Checks(spec)
    provider = spec.document.get("provider") or {}
    for key in ("project_id", "region", "availability_zone"):
        if not provider.get(key):
            checks.fail(key, f"provider.{key} is not set", f"set provider.{key}", ("provider",))
    if checks.failed:
        return checks.results
    status, detail, hint, creds, _ = _auth()
    checks.add(status, "credentials", detail, hint)
    if status == FAIL:
        return checks.results
    compute = _Compute(creds)
    try:
        located = _check_location(checks, compute, provider)
        if located is None:
            return checks.results
        needs = _check_node_types(checks, compute, provider)
        _check_images(checks, compute)
        _check_quotas(checks, *located, needs)
    except (api.GoogleAPICallError, auth.GoogleAuthError) as exc:
        checks.fail("gcp", f"Compute Engine call failed: {sdk_message(exc)}",
                    "check the credentials' roles (compute.viewer at least) and the network")
    return checks.results


def _check_location(checks: Checks, compute: Any, provider: Config) -> tuple[Any, Any] | None:
    """Project, region and zone; returns (Project, Region), both with their quotas, or None."""
    from google.api_core.exceptions import Forbidden, NotFound, Unauthorized
    project, region_name, zone_name = (provider[k] for k in ("project_id", "region", "availability_zone"))
    try:
        found = compute.ProjectsClient.get(project=project, timeout=TIMEOUT)
    except Unauthorized as exc:
        checks.fail("project", f"Google refused the credentials: {sdk_message(exc)}", CREDENTIALS_HINT,
                    ("provider", "project_id"))
        return None
    except (NotFound, Forbidden) as exc:
        checks.fail("project", f"project {project!r} is not usable: {sdk_message(exc)}",
                    "check provider.project_id, the credentials' access to it, and that the "
                    "Compute Engine API is enabled", ("provider", "project_id"))
        return None
    checks.ok("project", project, ("provider", "project_id"))
    try:
        region = compute.RegionsClient.get(project=project, region=region_name, timeout=TIMEOUT)
    except NotFound:
        names = [r.name for r in compute.RegionsClient.list(project=project, timeout=TIMEOUT)]
        checks.fail("region", f"there is no region {region_name!r}",
                    suggest(region_name, names, "regions"), ("provider", "region"))
        return None
    zones = sorted(_basename(z) for z in region.zones)
    checks.ok("region", f"{region_name}: zones {listing(zones)}", ("provider", "region"))
    path = ("provider", "availability_zone")
    try:
        zone = compute.ZonesClient.get(project=project, zone=zone_name, timeout=TIMEOUT)
    except NotFound:
        checks.fail("zone", f"there is no zone {zone_name!r}",
                    f"zones of {region_name}: {listing(zones)}", path)
        return None
    if _basename(zone.region) != region_name:
        checks.fail("zone", f"zone {zone_name} is in region {_basename(zone.region)}, not {region_name}",
                    f"zones of {region_name}: {listing(zones)}", path)
        return None
    checks.ok("zone", f"{zone_name} ({zone.status or 'UP'})", path)
    return found, region


def _zones_offering(client: Any, project: str, name: str, region: str) -> list[str]:
    """The zones of `region` where a machine/accelerator type of this name exists."""
    reply = client.aggregated_list(request={"project": project, "filter": f'name = "{name}"'},
                                   timeout=TIMEOUT)
    zones = []
    for scope, scoped in reply:
        items = getattr(scoped, "machine_types", None) or getattr(scoped, "accelerator_types", None)
        if items and _basename(scope).startswith(region + "-"):
            zones.append(_basename(scope))
    return sorted(zones)


def _check_node_types(checks: Checks, compute: Any, provider: Config) -> Needs:
    """Machine and accelerator types of each node type; returns {node type: {quota metric: n}}."""
    from google.api_core.exceptions import NotFound
    project, region, zone = (provider[k] for k in ("project_id", "region", "availability_zone"))
    needs: Needs = {}
    seen: dict[str, Any] = {}  # machine type -> MachineType, fetched once
    for name, node_type in node_types(checks.spec.document):
        config = node_type.get("node_config") or {}
        scheduling = config.get("scheduling") or {}
        if isinstance(scheduling, list):  # Ray's GCP examples write it as a list of mappings
            scheduling = {k: v for item in scheduling if isinstance(item, dict) for k, v in item.items()}
        preemptible = bool(scheduling.get("preemptible")) or scheduling.get("provisioningModel") == "SPOT"
        prefix = "PREEMPTIBLE_" if preemptible else ""
        need = needs.setdefault(name, {})
        if config.get("machineType"):
            machine = _basename(config["machineType"])
            path = node_path(name, "machineType")
            try:
                if machine not in seen:
                    seen[machine] = compute.MachineTypesClient.get(
                        project=project, zone=zone, machine_type=machine, timeout=TIMEOUT)
                found = seen[machine]
            except NotFound:
                offering = _zones_offering(compute.MachineTypesClient, project, machine, region)
                if offering:
                    hint = f"zones of {region} that offer it: {listing(offering)}"
                else:
                    names = [m.name for m in compute.MachineTypesClient.list(
                        project=project, zone=zone, timeout=TIMEOUT)]
                    hint = suggest(machine, names, f"machine types in {zone}")
                checks.fail("machine type", f"{machine} is not offered in zone {zone}", hint, path)
            else:
                checks.ok("machine type", f"{machine} ({found.guest_cpus} vCPUs) in {zone}", path)
                family = machine.split("-")[0] if not machine.startswith("custom") else "n1"
                need[(prefix, family.upper() + "_CPUS")] = found.guest_cpus
                for acc in found.accelerators:
                    need[(prefix, _gpu_metric(acc.guest_accelerator_type))] = acc.guest_accelerator_count
        for index, acc in enumerate(config.get("guestAccelerators") or []):
            kind, count = _basename(acc.get("acceleratorType", "")), int(acc.get("acceleratorCount", 1))
            path = node_path(name, "guestAccelerators", index, "acceleratorType")
            try:
                found = compute.AcceleratorTypesClient.get(
                    project=project, zone=zone, accelerator_type=kind, timeout=TIMEOUT)
            except NotFound:
                offering = _zones_offering(compute.AcceleratorTypesClient, project, kind, region)
                checks.fail("accelerator", f"{kind} is not offered in zone {zone}",
                            f"zones of {region} that offer it: {listing(offering)}", path)
                continue
            if count > found.maximum_cards_per_instance:
                checks.fail("accelerator", f"{count} x {kind} on one VM; at most "
                            f"{found.maximum_cards_per_instance}", "lower acceleratorCount",
                            node_path(name, "guestAccelerators", index, "acceleratorCount"))
                continue
            checks.ok("accelerator", f"{count} x {kind} in {zone}", path)
            need[(prefix, _gpu_metric(kind))] = need.get((prefix, _gpu_metric(kind)), 0) + count
    return needs


def _gpu_metric(kind: str) -> str:
    return _basename(kind).upper().replace("-", "_").replace("TESLA_", "") + "_GPUS"


def _check_images(checks: Checks, compute: Any) -> None:
    from google.api_core.exceptions import Forbidden, NotFound
    own = checks.spec.document["provider"]["project_id"]
    for name, node_type in node_types(checks.spec.document):
        disks = (node_type.get("node_config") or {}).get("disks") or []
        for index, disk in enumerate(disks):
            source = (disk.get("initializeParams") or {}).get("sourceImage")
            if not source:
                continue
            path = node_path(name, "disks", index, "initializeParams", "sourceImage")
            match = IMAGE.search(source) or IMAGE.search(f"projects/{own}/{source.lstrip('/')}")
            if not match:
                checks.fail("image", f"cannot read the image reference {source!r}",
                            "use projects/P/global/images/NAME or projects/P/global/images/family/F", path)
                continue
            project, image = match["project"], match["name"]
            try:
                if match["family"]:
                    found = compute.ImagesClient.get_from_family(project=project, family=image,
                                                                 timeout=TIMEOUT)
                else:
                    found = compute.ImagesClient.get(project=project, image=image, timeout=TIMEOUT)
            except (NotFound, Forbidden) as exc:
                what = "image family" if match["family"] else "image"
                checks.fail("image", f"{what} {image!r} of project {project} does not resolve "
                            f"({type(exc).__name__})", "check the name (gcloud compute images list "
                            f"--project {project}) and that it is shared with you", path)
                continue
            state = found.deprecated.state if found.deprecated else ""
            if state in ("OBSOLETE", "DELETED"):
                checks.fail("image", f"{found.name} is {state}", "use a current image or family", path)
            elif state == "DEPRECATED":
                checks.warn("image", f"{found.name} is deprecated", "prefer its replacement", path)
            else:
                checks.ok("image", f"{source} -> {found.name}", path)


def _check_quotas(checks: Checks, project: Any, region: Any, needs: Needs) -> None:
    quotas = {q.metric: q for q in region.quotas}
    document = checks.spec.document

    def metric_of(prefix: str, metric: str) -> str:
        if metric.endswith("_CPUS") and metric not in quotas:
            metric = "CPUS"
        preemptible = quotas.get(prefix + metric)
        if prefix and preemptible is not None and preemptible.limit > 0:
            return prefix + metric
        return metric

    amounts: dict[str, dict[str, int]] = {name: {} for name in needs}  # node type -> {quota metric: amount}
    for name, keyed in needs.items():
        for key, amount in keyed.items():
            metric = metric_of(*key)
            amounts[name][metric] = amounts[name].get(metric, 0) + amount
    totals: dict[str, float] = {}
    for metric in {m for amount in amounts.values() for m in amount}:
        def uses(n: str, t: Config, metric: str = metric) -> str | None:
            return metric if metric in amounts.get(n, {}) else None

        def weight(n: str, t: Config, metric: str = metric) -> int:
            return amounts[n][metric]

        totals.update(worst_case(document, uses, weight))
    for metric, need in sorted(totals.items()):
        quota = quotas.get(metric)
        compare_quota(checks, "quota", metric, need, quota and quota.limit, quota and quota.usage,
                      region.name, f"request more {metric} quota", "see IAM & Admin > Quotas")
    # Project-wide: every vCPU and every GPU, in any region, also counts against these two.
    project_quotas = {q.metric: q for q in project.quotas}
    for metric, suffix in (("CPUS_ALL_REGIONS", "CPUS"), ("GPUS_ALL_REGIONS", "_GPUS")):
        per_type = {n: sum(v for m, v in a.items() if m.endswith(suffix)) for n, a in amounts.items()}

        def counts(n: str, t: Config, metric: str = metric,
                   per_type: dict[str, int] = per_type) -> str | None:
            return metric if per_type.get(n) else None

        def total(n: str, t: Config, per_type: dict[str, int] = per_type) -> int:
            return per_type[n]

        need = worst_case(document, counts, total).get(metric, 0)
        quota = project_quotas.get(metric)
        if need:
            compare_quota(checks, "quota", metric, need, quota and quota.limit, quota and quota.usage,
                          f"project {project.name}", f"request more {metric} quota",
                          "see IAM & Admin > Quotas")


def location(config: Config) -> str:
    provider = config.get("provider") or {}
    return f"GCP project {provider.get('project_id', '?')} ({provider.get('region', '?')})"


def bootstrap_key(config: Config) -> str | None:
    """None: GCP's bootstrap puts its key in the project's metadata, not in the instance: not looked for."""
    return None
