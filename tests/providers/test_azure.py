"""Azure preflight with the real azure-identity credential and azure-mgmt clients.

The cloud API is faked at the wire: Azure has no emulator for Resource Manager or Entra ID, so
DefaultAzureCredential (narrowed to EnvironmentCredential: a service principal, authority
AZURE_AUTHORITY_HOST) and the SubscriptionClient / ComputeManagementClient (base_url from
ORCHESTRATE_AZURE_ENDPOINT) talk HTTPS to a loopback server replaying recorded responses
(tests/providers/recorded/azure). MSAL's tenant discovery, the client-credentials token
request, and every ARM request and reply go through the SDKs' own code.
"""
from __future__ import annotations

from urllib.parse import parse_qs

from orchestrator.providers import FAIL, OK, WARN, check_cluster

from .conftest import AZURE_SUBSCRIPTION, AZURE_TENANT, by_name, only

SUB = f"/subscriptions/{AZURE_SUBSCRIPTION}"
SKUS = f"{SUB}/providers/Microsoft.Compute/skus"
USAGES = f"{SUB}/providers/Microsoft.Compute/locations/westus2/usages"


def azure_yaml(location="westus2", worker="Standard_NC4as_T4_v3", spot=False, subscription=True):
    priority = "\n            priority: Spot" if spot else ""
    sub = f"\n      subscription_id: {AZURE_SUBSCRIPTION}" if subscription else ""
    return f"""
    cluster_name: preflight-azure
    max_workers: 4
    provider:
      type: azure
      location: {location}
      resource_group: preflight-rg{sub}
    auth:
      ssh_user: ubuntu
    available_node_types:
      ray.head.default:
        node_config:
          azure_arm_parameters:
            vmSize: Standard_D2s_v3
            imagePublisher: microsoft-dsvm
            imageOffer: ubuntu-2004
            imageSku: 2004-gen2
            imageVersion: latest
        resources: {{}}
      ray.worker.gpu:
        node_config:
          azure_arm_parameters:
            vmSize: {worker}{priority}
        resources: {{}}
        min_workers: 0
        max_workers: 4
    head_node_type: ray.head.default
    """


def serve(cloud, state="Enabled", cores=20, t4_family=24, spot=0):
    values = {"subscription": AZURE_SUBSCRIPTION, "tenant": AZURE_TENANT}
    cloud.route("GET", SUB, cloud.recorded("azure/subscription.json", state=state, **values))
    cloud.route("GET", f"{SUB}/locations", cloud.recorded("azure/locations.json", **values))
    cloud.route("GET", SKUS, cloud.recorded("azure/resource-skus-westus2.json"))
    cloud.route("GET", USAGES, cloud.recorded("azure/usages-westus2.json", cores=cores,
                                              t4_family=t4_family, spot=spot))


def test_a_launchable_cluster_passes_with_a_real_token_flow(azure, cluster):
    serve(azure)
    results = check_cluster(cluster(azure_yaml()))
    assert [r for r in results if r.status != OK] == []
    assert "Orchestrate preflight" in only(results, "subscription").detail
    sizes = by_name(results, "vm size")
    assert "Standard_NC4as_T4_v3 (4 vCPUs, Standard NCASv3_T4 Family)" in sizes[1].detail
    token = [r for r in azure.requests if r["path"].endswith("/oauth2/v2.0/token")]
    form = parse_qs(token[0]["body"])
    assert form["grant_type"] == ["client_credentials"] and form["client_secret"] == ["not-a-secret"]
    assert form["scope"] == ["https://management.azure.com/.default"]
    arm = [r for r in azure.requests if r["path"].startswith("/subscriptions/")]
    assert len(arm) == 4
    assert all(r["headers"]["authorization"] == f"Bearer {azure.recorded('azure/token.json')['access_token']}"
               for r in arm)
    skus = [r for r in arm if r["path"] == SKUS][0]
    assert skus["query"]["$filter"] == ["location eq 'westus2'"]


def test_unknown_location_suggests_the_real_one(azure, cluster):
    serve(azure)
    result = only(check_cluster(cluster(azure_yaml(location="westus9"))), "location")
    assert result.status == FAIL and "'westus9'" in result.detail
    assert "westus2" in result.hint and result.field == "provider.location" and result.line == 5


def test_vm_size_not_offered_suggests_available_sizes(azure, cluster):
    serve(azure)
    spec = cluster(azure_yaml(worker="Standard_NC4as_T4_v4"))
    result = [r for r in check_cluster(spec) if r.name == "vm size" and r.status == FAIL][0]
    assert result.detail == "Standard_NC4as_T4_v4 is not offered in westus2"
    assert "Standard_NC4as_T4_v3" in result.hint
    assert result.field == "available_node_types.ray.worker.gpu.node_config.azure_arm_parameters.vmSize"
    assert result.line == 23


def test_vm_size_restricted_for_the_subscription(azure, cluster):
    serve(azure)
    result = [r for r in check_cluster(cluster(azure_yaml(worker="Standard_NC6s_v3")))
              if r.name == "vm size" and r.status == FAIL][0]
    assert "restricted in westus2" in result.detail and "NotAvailableForSubscription" in result.detail
    assert "Standard_NC6s_v3" not in result.hint


def test_family_quota_too_small_for_the_worst_case(azure, cluster):
    serve(azure, t4_family=8)
    failed = [r for r in by_name(check_cluster(cluster(azure_yaml())), "vCPU quota") if r.status == FAIL]
    assert [r.detail for r in failed] == [
        "the worst case needs 16 vCPUs of 'Standard NCASv3_T4 Family vCPUs' in westus2; 8 free "
        "(limit 8, in use 0)"]
    assert failed[0].field == "max_workers" and failed[0].line == 2


def test_spot_workers_count_against_the_spot_quota(azure, cluster):
    serve(azure, spot=4)
    quotas = by_name(check_cluster(cluster(azure_yaml(spot=True))), "vCPU quota")
    failed = [r.detail for r in quotas if r.status == FAIL]
    assert failed == ["the worst case needs 16 vCPUs of 'Total Regional Spot vCPUs' in westus2; "
                      "4 free (limit 4, in use 0)"]
    assert any("Total Regional vCPUs': the worst case needs 2," in r.detail for r in quotas)


def test_unknown_subscription(azure, cluster):
    serve(azure)
    azure.route("GET", SUB, azure.recorded("azure/subscription-not-found.json",
                                           subscription=AZURE_SUBSCRIPTION), 404)
    result = only(check_cluster(cluster(azure_yaml())), "subscription")
    assert result.status == FAIL and "SubscriptionNotFound" in result.detail
    assert result.field == "provider.subscription_id"


def test_disabled_subscription(azure, cluster):
    serve(azure, state="Disabled")
    result = only(check_cluster(cluster(azure_yaml())), "subscription")
    assert result.status == FAIL and result.detail == "subscription Orchestrate preflight is Disabled"


def test_rejected_client_secret_stops_before_resource_manager(azure, cluster):
    serve(azure)
    azure.route("POST", f"/{AZURE_TENANT}/oauth2/v2.0/token",
                azure.recorded("azure/invalid-client.json"), 401)
    results = check_cluster(cluster(azure_yaml()))
    assert [(r.name, r.status) for r in results] == [("credentials", FAIL)]
    assert "AADSTS7000215" in results[0].detail and "az login" in results[0].hint
    assert not [r for r in azure.requests if r["path"].startswith("/subscriptions/")]


def test_missing_subscription_id_is_reported_without_a_call(azure, cluster):
    result = only(check_cluster(cluster(azure_yaml(subscription=False))), "subscription")
    assert result.status == FAIL and "subscription_id" in result.hint
    assert azure.requests == []


def test_default_node_types_are_reported_as_unchecked(azure, cluster):
    serve(azure)
    results = check_cluster(cluster(f"""
    cluster_name: preflight-azure
    max_workers: 1
    provider: {{type: azure, location: westus2, resource_group: rg, subscription_id: {AZURE_SUBSCRIPTION}}}
    auth: {{ssh_user: ubuntu}}
    """))
    assert only(results, "node types").status == WARN
    others = {r.name: r.status for r in results if r.name != "node types"}
    assert others == {"credentials": OK, "subscription": OK, "location": OK}


AUTOSTOP = "autostop: {idle_minutes: 20}\n"


def test_autostop_with_the_identity_rays_template_gives_the_head_passes(cluster):
    from orchestrator.providers import azure

    [result] = azure.head_credentials(cluster(azure_yaml() + AUTOSTOP))
    assert result.name == "head credentials" and result.status == OK
    assert "Contributor on resource group preflight-rg" in result.detail
    assert azure.head_credentials(cluster(azure_yaml(), name="no-autostop.yaml")) == []


def test_autostop_with_a_shared_identity_warns_naming_what_it_needs(cluster):
    from orchestrator.providers import azure

    yaml = azure_yaml().replace("resource_group: preflight-rg", "resource_group: preflight-rg\n"
                                "      msi_name: team-msi\n      msi_resource_group: shared-rg", 1)
    [result] = azure.head_credentials(cluster(yaml + AUTOSTOP))
    assert result.status == WARN and "team-msi" in result.detail
    assert "Microsoft.Compute/virtualMachines/deallocate/action" in result.detail
    assert "Contributor" in result.hint and result.field == "provider.msi_name" and result.line
