"""`azure`: what orchestrate knows about Ray's Azure provider (the shorthand's ARM parameters,
what forces a new cluster) and its preflight through azure-identity and azure-mgmt-*:
credentials, subscription, location, VM sizes (resource SKUs with their restrictions) and
regional vCPU quotas.

Credentials: DefaultAzureCredential (environment, workload identity, managed identity, Azure
CLI ...; AZURE_TOKEN_CREDENTIALS narrows the chain). ORCHESTRATE_AZURE_ENDPOINT sets the Resource
Manager endpoint; with it set, Entra instance discovery is off, so a custom AZURE_AUTHORITY_HOST
is used as given.
"""
from __future__ import annotations

import os
from typing import Any, cast

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
    node_path,
    node_types,
    sdk_message,
    suggest,
    worst_case,
)

NAME = "azure"
EXTRA = "azure"
# Provider fields Ray's Azure provider reads.
KEYS = ("location", "resource_group", "subscription_id", "msi_identity_id",
        "msi_identity_principal_id", "subnet_id", "tags", "unique_id", "use_external_head_ip")
REQUIRED = ("location", "resource_group")
REPLACE_FIELDS = ("provider.location", "provider.resource_group", "provider.subscription_id")
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


def price_layout(config: Config) -> Config:
    return cloud.price_layout(config, NAME)


def _priced(config: Config, name: str, node_type: Config) -> tuple[NodePrice, str | None]:
    """The catalog has no zones for Azure: spot takes the region's (location's) price."""
    params = (node_type.get("node_config") or {}).get("azure_arm_parameters") or {}
    spot = str(params.get("priority", "")).lower() == "spot"
    region = str((config.get("provider") or {}).get("location") or "")
    return cloud.priced(NAME, name, node_type, ("azure_arm_parameters", "vmSize"), region, None,
                        spot)


def node_price(config: Config, name: str, node_type: Config) -> NodePrice:
    return _priced(config, name, node_type)[0]


def price_warning(config: Config, name: str, node_type: Config) -> str | None:
    return _priced(config, name, node_type)[1]
DEFAULT_IMAGE = {"imagePublisher": "microsoft-dsvm", "imageOffer": "ubuntu-2004",
                 "imageSku": "2004-gen2", "imageVersion": "latest"}


def problems(doc: Document, data: Config) -> list[Problem]:
    return []


def group_problems(doc: Document, path: FieldPath, group: Config) -> list[Problem]:
    return cloud.group_problems(doc, path, group, NAME)


def node_config(group: Config) -> Config:
    params: Config = {"vmSize": group["instance_type"], **DEFAULT_IMAGE}
    if "image" in group:
        keys = ("imagePublisher", "imageOffer", "imageSku", "imageVersion")
        params.update(dict(zip(keys, group["image"].split(":"), strict=False)))  # a:b:c:d
    if "disk_gb" in group:
        params["osDiskSizeGB"] = group["disk_gb"]
    if group.get("spot"):
        params["priority"] = "Spot"
    return {"azure_arm_parameters": params}


def check(spec: ClusterView) -> list[CheckResult]:
    return _checks(spec) + head_credentials(spec) + cloud.archive_note(spec) + \
        cloud.node_types_note(spec, NAME)


def head_credentials(spec: ClusterView) -> list[CheckResult]:
    """Autostop runs Ray's node provider on the head as the managed identity Ray's template gives
    the head (`ray-<cluster id>-msi`, Contributor on the resource group); a shared identity the
    file names (`msi_name` and `msi_resource_group`) gets no role from Ray, and its role
    assignments are not read here, so it gets a warning naming what it needs."""
    if not cloud.autostop_wanted(spec):
        return []
    checks = Checks(spec)
    provider = spec.document.get("provider") or {}
    group = provider.get("resource_group") or "?"
    stops = provider.get("cache_stopped_nodes", True)   # Ray's Azure default: deallocate
    vms = "Microsoft.Compute/virtualMachines"
    needs = (f"{vms}/read and " + (f"{vms}/deallocate/action" if stops else
                                   f"{vms}/delete (and the deletes of their disks, network "
                                   "interfaces and public addresses)") + f" on resource group {group}")
    wanted = "autostop takes the cluster down from its head as the head's managed identity"
    msi, msi_group = provider.get("msi_name"), provider.get("msi_resource_group")
    if msi is None or msi_group is None:   # Ray's `_is_shared_msi`
        checks.ok(cloud.HEAD_CREDENTIALS, f"{wanted}: Ray's template gives it Contributor on "
                  f"resource group {group} ({needs})", cloud.AUTOSTOP_PATH)
    else:
        checks.warn(cloud.HEAD_CREDENTIALS, f"{wanted} {msi} (resource group {msi_group}), "
                    f"whose role assignments are not checked here: it needs {needs}",
                    f"assign {msi} Contributor (or Virtual Machine Contributor) on resource group "
                    f"{group}, or drop msi_name to have Ray's own identity",
                    ("provider", "msi_name"))
    return checks.results


SCOPE = "https://management.azure.com/.default"
CREDENTIALS_HINT = ("run `az login`, or set AZURE_TENANT_ID, AZURE_CLIENT_ID and "
                    "AZURE_CLIENT_SECRET for a service principal")


def _endpoint() -> dict[str, str]:
    endpoint = os.environ.get("ORCHESTRATE_AZURE_ENDPOINT")
    return {"base_url": endpoint} if endpoint else {}


def _client_options() -> dict[str, Any]:
    """Endpoint plus short timeouts and few retries: a preflight answers in seconds or fails."""
    return {**_endpoint(), "connection_timeout": 10, "read_timeout": 30, "retry_total": 2}


def _credential() -> Any:
    require("azure.mgmt.compute", "azure-mgmt-compute", EXTRA)
    identity = require("azure.identity", "azure-identity", EXTRA)
    options = {"disable_instance_discovery": True} if _endpoint() else {}
    return identity.DefaultAzureCredential(**options)


def _token(credential: Any) -> tuple[str, str, str | None]:
    from azure.core.exceptions import AzureError, ClientAuthenticationError
    try:
        credential.get_token(SCOPE)
    except ClientAuthenticationError as exc:
        # DefaultAzureCredential's first line is generic; each credential's reason follows.
        reasons = [line.strip() for line in str(exc).splitlines()[1:] if "Credential: " in line]
        detail = "; ".join(reasons)[:400] if reasons else sdk_message(exc)
        return FAIL, f"no usable Azure credentials: {detail}", CREDENTIALS_HINT
    except AzureError as exc:
        return FAIL, f"could not get an Azure token: {sdk_message(exc)}", CREDENTIALS_HINT
    return OK, "a Resource Manager token was issued", None


def credentials() -> CheckResult:
    return CheckResult("azure credentials", *_token(_credential()))


def _checks(spec: ClusterView) -> list[CheckResult]:
    from azure.core.exceptions import AzureError
    checks = Checks(spec)
    provider = spec.document.get("provider") or {}
    location = provider.get("location", "")
    subscription = provider.get("subscription_id") or os.environ.get("AZURE_SUBSCRIPTION_ID", "")
    if not location:
        checks.fail("location", "provider.location is not set", "set provider.location, e.g. westus2",
                    ("provider",))
    if not subscription:
        checks.fail("subscription", "no subscription: provider.subscription_id is not set",
                    "set provider.subscription_id (or AZURE_SUBSCRIPTION_ID)", ("provider",))
    if checks.failed:
        return checks.results
    credential = _credential()
    status, detail, hint = _token(credential)
    checks.add(status, "credentials", detail, hint)
    if status == FAIL:
        return checks.results
    try:
        if _check_subscription(checks, credential, subscription, location):
            from azure.mgmt.compute import ComputeManagementClient
            compute = ComputeManagementClient(credential, subscription, **_client_options())
            skus = _check_vm_sizes(checks, compute, location)
            _check_quotas(checks, compute, location, skus)
    except AzureError as exc:
        checks.fail("azure", f"Azure call failed: {sdk_message(exc)}",
                    "check the credentials' role on the subscription (Reader at least)")
    return checks.results


def _check_subscription(checks: Checks, credential: Any, subscription: str, location: str) -> bool:
    from azure.core.exceptions import HttpResponseError
    from azure.mgmt.subscription import SubscriptionClient
    client: Any = SubscriptionClient(credential, **_client_options())
    path = ("provider", "subscription_id")
    try:
        found = client.subscriptions.get(subscription)
    except HttpResponseError as exc:
        checks.fail("subscription", f"subscription {subscription} is not usable: {sdk_message(exc)}",
                    "check provider.subscription_id and the credentials' access to it", path)
        return False
    state = str(found.state or "")
    if state and state.lower() not in ("enabled", "subscriptionstate.enabled"):
        checks.fail("subscription", f"subscription {found.display_name} is {state}",
                    "use an enabled subscription", path)
        return False
    checks.ok("subscription", f"{found.display_name} ({subscription})", path)
    locations = {loc.name: loc.display_name for loc in client.subscriptions.list_locations(subscription)}
    path = ("provider", "location")
    if location not in locations:
        checks.fail("location", f"{location!r} is not a location of this subscription",
                    suggest(location, locations, "locations"), path)
        return False
    checks.ok("location", f"{location} ({locations[location]})", path)
    return True


def _vm_size(node_type: Config) -> str | None:
    return ((node_type.get("node_config") or {}).get("azure_arm_parameters") or {}).get("vmSize")


def _restriction(sku: Any, location: str) -> str | None:
    for restriction in sku.restrictions or []:
        if str(restriction.type).lower().endswith("location") and \
                location.lower() in [v.lower() for v in restriction.values_property or []]:
            return str(getattr(restriction.reason_code, "value", restriction.reason_code) or "restricted")
    return None


def _check_vm_sizes(checks: Checks, compute: Any, location: str) -> dict[str, Any]:
    """Check each vmSize; returns {vm size: its ResourceSku} for the usable ones."""
    skus = {sku.name: sku for sku in compute.resource_skus.list(filter=f"location eq '{location}'")
            if sku.resource_type == "virtualMachines"}
    usable = {name for name, sku in skus.items() if _restriction(sku, location) is None}
    found: dict[str, Any] = {}
    for name, node_type in node_types(checks.spec.document):
        size = _vm_size(node_type)
        if not size:
            continue
        path = node_path(name, "azure_arm_parameters", "vmSize")
        sku = skus.get(size)
        if sku is None:
            checks.fail("vm size", f"{size} is not offered in {location}",
                        suggest(size, usable, f"sizes available in {location}"), path)
        elif _restriction(sku, location):
            checks.fail("vm size", f"{size} is restricted in {location} for this subscription "
                        f"({_restriction(sku, location)})",
                        suggest(size, usable - {size}, f"unrestricted sizes in {location}"), path)
        else:
            found[size] = sku
            checks.ok("vm size", f"{size} ({_vcpus(sku)} vCPUs, {sku.family}) in {location}", path)
    return found


def _vcpus(sku: Any) -> int:
    caps = {c.name: c.value for c in sku.capabilities or []}
    return int(float(caps.get("vCPUs", 0) or 0))


def _check_quotas(checks: Checks, compute: Any, location: str, skus: dict[str, Any]) -> None:
    usages = {u.name.value: u for u in compute.usage.list(location)}
    document = checks.spec.document

    def spot(node_type: Config) -> bool:
        params = (node_type.get("node_config") or {}).get("azure_arm_parameters") or {}
        return str(params.get("priority", "")).lower() == "spot"

    def vcpus(name: str, node_type: Config) -> int:
        return _vcpus(skus[cast(str, _vm_size(node_type))])  # only types `family` found in skus

    def family(name: str, node_type: Config) -> str | None:
        size = _vm_size(node_type)
        if size not in skus:
            return None
        return "lowPriorityCores" if spot(node_type) else skus[size].family

    needs = worst_case(document, family, vcpus)
    needs.update(worst_case(document, lambda n, t: "cores" if family(n, t) and not spot(t) else None,
                            vcpus))
    for name, need in sorted(needs.items()):
        usage = usages.get(name)
        label = f"vCPUs of {(usage.name.localized_value if usage else None) or name!r}"
        compare_quota(checks, "vCPU quota", label, need, usage and usage.limit,
                      usage and usage.current_value, location, f"request more {label}",
                      "see Subscriptions > Usage + quotas")


def location(config: Config) -> str:
    provider = config.get("provider") or {}
    return (f"Azure resource group {provider.get('resource_group', '?')} "
            f"({provider.get('location', '?')})")


def bootstrap_key(config: Config) -> str | None:
    """None: Azure's launcher takes the key the file names."""
    return None
