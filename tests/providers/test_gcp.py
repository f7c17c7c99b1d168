"""GCP preflight with the real google-cloud-compute clients and google-auth credentials.

The cloud API is faked at the wire: Google ships no Compute Engine emulator, so the SDK's REST
clients (api_endpoint from ORCHESTRATE_GCP_ENDPOINT) and google-auth's service-account token
exchange (token_uri in the key file) talk HTTPS to a loopback server replaying recorded API
responses (tests/providers/recorded/gcp). The SDK builds every request and parses every reply.
"""
from __future__ import annotations

from orchestrator.providers import FAIL, OK, WARN, check_cluster

from .conftest import GCP_PROJECT, by_name, only

API = f"/compute/v1/projects/{GCP_PROJECT}"
IMAGES = "/compute/v1/projects/deeplearning-platform-release/global/images"
CPU_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cpu"
GPU_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu124"


def gcp_yaml(region="us-central1", zone="us-central1-a", worker="n1-standard-8",
             accelerator="nvidia-tesla-t4", count=1, image=GPU_IMAGE):
    return f"""
    cluster_name: preflight-gcp
    max_workers: 4
    provider: {{type: gcp, region: {region}, availability_zone: {zone}, project_id: {GCP_PROJECT}}}
    auth: {{ssh_user: ubuntu}}
    available_node_types:
      head:
        node_config:
          machineType: n1-standard-8
          disks:
            - {{boot: true, autoDelete: true, type: PERSISTENT,
                initializeParams: {{diskSizeGb: 50, sourceImage: {CPU_IMAGE}}}}}
        resources: {{}}
      t4:
        node_config:
          machineType: {worker}
          guestAccelerators:
            - acceleratorType: {accelerator}
              acceleratorCount: {count}
          scheduling:
            - preemptible: true
            - onHostMaintenance: TERMINATE
          disks:
            - boot: true
              initializeParams:
                sourceImage: {image}
        resources: {{GPU: 1}}
        min_workers: 0
        max_workers: 4
    head_node_type: head
    """


def not_found(cloud, resource):
    return cloud.recorded("gcp/not-found.json", resource=resource)


def serve(cloud, cpus=48, preemptible_t4=4, cpus_all=64, gpus_all=8):
    """The recorded replies of a project where the default cluster fits."""
    cloud.route("GET", API, cloud.recorded("gcp/project.json", cpus_all=cpus_all, gpus_all=gpus_all))
    cloud.route("GET", f"{API}/regions/us-central1",
                cloud.recorded("gcp/region-us-central1.json", cpus=cpus, preemptible_t4=preemptible_t4))
    cloud.route("GET", f"{API}/zones/us-central1-a", cloud.recorded("gcp/zone-us-central1-a.json"))
    cloud.route("GET", f"{API}/zones/us-central1-a/machineTypes/n1-standard-8",
                cloud.recorded("gcp/machine-type-n1-standard-8.json"))
    cloud.route("GET", f"{API}/zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
                cloud.recorded("gcp/accelerator-type-nvidia-tesla-t4.json"))
    cloud.route("GET", f"{IMAGES}/family/common-cpu", cloud.recorded("gcp/image-family-common-cpu.json"))
    cloud.route("GET", f"{IMAGES}/family/common-cu124", cloud.recorded("gcp/image-family-common-cu124.json"))


def test_a_launchable_cluster_passes_and_uses_real_credentials(gcp, cluster):
    serve(gcp)
    results = check_cluster(cluster(gcp_yaml()))
    assert [r for r in results if r.status != OK] == []
    assert f"preflight@{GCP_PROJECT}.iam.gserviceaccount.com" in only(results, "credentials").detail
    assert "n1-standard-8 (8 vCPUs)" in by_name(results, "machine type")[0].detail
    quotas = {r.detail.split(":")[0]: r.detail for r in by_name(results, "quota")}
    # head 8 + 4 preemptible workers x 8 (PREEMPTIBLE_CPUS has limit 0, so they count as CPUS)
    assert "needs 40, 44 free" in quotas["CPUS"]
    assert "needs 4, 4 free" in quotas["PREEMPTIBLE_NVIDIA_T4_GPUS"]
    assert "needs 40, 60 free" in quotas["CPUS_ALL_REGIONS"]
    assert "needs 4, 8 free" in quotas["GPUS_ALL_REGIONS"]
    api_calls = [r for r in gcp.requests if r["path"].startswith("/compute/")]
    assert len(api_calls) == 7 and len(gcp.requests) == 7
    for call in api_calls:  # every call carries the JWT google-auth signed with the key file
        assert verified_claims(call)["iss"] == f"preflight@{GCP_PROJECT}.iam.gserviceaccount.com"


def verified_claims(request) -> dict:
    """The claims of the request's bearer JWT, its signature checked against the key file."""
    import json
    import os

    from cryptography.hazmat.primitives import serialization
    from google.auth import jwt

    scheme, token = request["headers"]["authorization"].split(" ", 1)
    assert scheme == "Bearer"
    with open(os.environ["GOOGLE_APPLICATION_CREDENTIALS"]) as handle:
        key = serialization.load_pem_private_key(json.load(handle)["private_key"].encode(), None)
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return jwt.decode(token, certs=public, verify=True)


def test_unknown_region_suggests_the_real_one(gcp, cluster):
    serve(gcp)
    gcp.route("GET", f"{API}/regions/us-centrall",
              not_found(gcp, f"projects/{GCP_PROJECT}/regions/us-centrall"), 404)
    gcp.route("GET", f"{API}/regions", gcp.recorded("gcp/regions.json"))
    result = only(check_cluster(cluster(gcp_yaml(region="us-centrall", zone="us-centrall-a"))), "region")
    assert result.status == FAIL and "us-centrall" in result.detail
    assert "us-central1" in result.hint and result.field == "provider.region" and result.line == 3


def test_unknown_zone_lists_the_region_zones(gcp, cluster):
    serve(gcp)
    gcp.route("GET", f"{API}/zones/us-central1-z", not_found(gcp, "projects/x/zones/us-central1-z"), 404)
    result = only(check_cluster(cluster(gcp_yaml(zone="us-central1-z"))), "zone")
    assert result.status == FAIL and result.field == "provider.availability_zone"
    assert "us-central1-a, us-central1-b, us-central1-c, us-central1-f" in result.hint


def test_machine_type_missing_in_zone_names_zones_that_offer_it(gcp, cluster):
    serve(gcp)
    gcp.route("GET", f"{API}/zones/us-central1-a/machineTypes/n2d-standard-8",
              not_found(gcp, "n2d-standard-8"), 404)
    gcp.route("GET", f"{API}/aggregated/machineTypes",
              gcp.recorded("gcp/aggregated-machine-types-n2d-standard-8.json"))
    spec = cluster(gcp_yaml(worker="n2d-standard-8"))
    result = [r for r in check_cluster(spec) if r.name == "machine type" and r.status == FAIL][0]
    assert result.detail == "n2d-standard-8 is not offered in zone us-central1-a"
    assert result.hint == "zones of us-central1 that offer it: us-central1-b, us-central1-c"
    assert result.field == "available_node_types.t4.node_config.machineType" and result.line == 15
    aggregated = [r for r in gcp.requests if r["path"].endswith("/aggregated/machineTypes")]
    assert aggregated[0]["query"]["filter"] == ['name = "n2d-standard-8"']


def test_misspelt_machine_type_suggests_from_the_zone(gcp, cluster):
    serve(gcp)
    gcp.route("GET", f"{API}/zones/us-central1-a/machineTypes/n1-standrd-8", not_found(gcp, "x"), 404)
    gcp.route("GET", f"{API}/aggregated/machineTypes", gcp.recorded("gcp/aggregated-empty.json"))
    gcp.route("GET", f"{API}/zones/us-central1-a/machineTypes",
              gcp.recorded("gcp/machine-types-us-central1-a.json"))
    result = [r for r in check_cluster(cluster(gcp_yaml(worker="n1-standrd-8")))
              if r.name == "machine type" and r.status == FAIL][0]
    assert "did you mean" in result.hint and "n1-standard-8" in result.hint


def test_accelerator_missing_in_zone_names_zones_that_offer_it(gcp, cluster):
    serve(gcp)
    gcp.route("GET", f"{API}/zones/us-central1-a/acceleratorTypes/nvidia-l4",
              not_found(gcp, "nvidia-l4"), 404)
    gcp.route("GET", f"{API}/aggregated/acceleratorTypes",
              gcp.recorded("gcp/aggregated-accelerator-types-nvidia-l4.json"))
    result = only(check_cluster(cluster(gcp_yaml(accelerator="nvidia-l4"))), "accelerator")
    assert result.status == FAIL and "nvidia-l4" in result.detail
    assert result.hint == "zones of us-central1 that offer it: us-central1-c"
    assert result.field == "available_node_types.t4.node_config.guestAccelerators.0.acceleratorType"
    assert result.line == 17


def test_more_accelerators_than_a_vm_takes(gcp, cluster):
    serve(gcp)
    result = only(check_cluster(cluster(gcp_yaml(count=8))), "accelerator")
    assert result.status == FAIL and "at most 4" in result.detail
    assert result.field.endswith("guestAccelerators.0.acceleratorCount")


def test_image_family_that_does_not_resolve(gcp, cluster):
    serve(gcp)
    gcp.route("GET", f"{IMAGES}/family/common-cu999", not_found(gcp, "common-cu999"), 404)
    image = "projects/deeplearning-platform-release/global/images/family/common-cu999"
    result = [r for r in check_cluster(cluster(gcp_yaml(image=image)))
              if r.name == "image" and r.status == FAIL][0]
    assert "image family 'common-cu999'" in result.detail
    assert result.field == "available_node_types.t4.node_config.disks.0.initializeParams.sourceImage"
    assert result.line == 25


def test_obsolete_image_fails(gcp, cluster):
    serve(gcp)
    gcp.route("GET", f"{IMAGES}/common-cu110-v20210302", gcp.recorded("gcp/image-obsolete.json"))
    image = "https://www.googleapis.com/compute/v1/projects/deeplearning-platform-release/global/images/common-cu110-v20210302"
    result = [r for r in check_cluster(cluster(gcp_yaml(image=image))) if r.status == FAIL]
    assert [r.detail for r in result] == ["common-cu110-v20210302 is OBSOLETE"]


def test_quotas_too_small_for_the_worst_case(gcp, cluster):
    serve(gcp, cpus=24, preemptible_t4=2)
    failed = {r.detail for r in by_name(check_cluster(cluster(gcp_yaml())), "quota") if r.status == FAIL}
    assert failed == {
        "the worst case needs 40 CPUS in us-central1; 20 free (limit 24, in use 4)",
        "the worst case needs 4 PREEMPTIBLE_NVIDIA_T4_GPUS in us-central1; 2 free (limit 2, in use 0)",
    }


def test_built_in_gpus_of_a2_count_against_the_a100_quota(gcp, cluster):
    serve(gcp)
    gcp.route("GET", f"{API}/zones/us-central1-a/machineTypes/a2-highgpu-1g",
              gcp.recorded("gcp/machine-type-a2-highgpu-1g.json"))
    results = check_cluster(cluster(gcp_yaml(worker="a2-highgpu-1g")))
    failed = [r.detail for r in by_name(results, "quota") if r.status == FAIL]
    assert failed == [  # head 8 + 4 x 12 vCPUs; 4 x 1 A100 built into a2-highgpu-1g
        "the worst case needs 56 CPUS in us-central1; 44 free (limit 48, in use 4)",
        "the worst case needs 4 NVIDIA_A100_GPUS in us-central1; 0 free (limit 0, in use 0)",
    ]


def test_rejected_credentials_are_reported_as_such(gcp, cluster):
    serve(gcp)
    gcp.route("GET", API, gcp.recorded("gcp/unauthenticated.json"), 401)
    results = check_cluster(cluster(gcp_yaml()))
    assert [(r.name, r.status) for r in results] == [("credentials", OK), ("project", FAIL)]
    assert "invalid authentication credentials" in results[1].detail
    assert "gcloud auth" in results[1].hint


def test_no_credentials_at_all(gcp, cluster, monkeypatch):
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    results = check_cluster(cluster(gcp_yaml()))
    assert [(r.name, r.status) for r in results] == [("credentials", FAIL)]
    assert gcp.requests == []


def test_project_without_the_compute_api(gcp, cluster):
    serve(gcp)
    gcp.route("GET", API, gcp.recorded("gcp/forbidden.json"), 403)
    result = only(check_cluster(cluster(gcp_yaml())), "project")
    assert result.status == FAIL and "Compute Engine API has not been used" in result.detail
    assert result.field == "provider.project_id" and result.line == 3
    assert [r["path"] for r in gcp.requests] == [API]


def test_project_wide_gpu_quota_of_a_new_project(gcp, cluster):
    serve(gcp, gpus_all=0)  # new projects start with GPUS_ALL_REGIONS = 0
    failed = [r for r in by_name(check_cluster(cluster(gcp_yaml())), "quota") if r.status == FAIL]
    assert [r.detail for r in failed] == [
        "the worst case needs 4 GPUS_ALL_REGIONS in project orchestrate-test; 0 free (limit 0, in use 0)"]
    assert failed[0].hint == "lower max_workers, or request more GPUS_ALL_REGIONS quota"


AUTOSTOP = "autostop: {max_uptime_minutes: 600}\n"


def with_account(yaml: str, scopes: str) -> str:
    account = (f"\n          serviceAccounts: [{{email: head@{GCP_PROJECT}.iam.gserviceaccount.com, "
               f"scopes: [{scopes}]}}]")
    return yaml.replace("machineType: n1-standard-8\n", f"machineType: n1-standard-8{account}\n", 1)


def test_autostop_with_rays_default_head_account_passes(cluster):
    from orchestrator.providers import gcp

    [result] = gcp.head_credentials(cluster(gcp_yaml() + AUTOSTOP))
    assert result.name == "head credentials" and result.status == OK
    assert f"ray-autoscaler-sa-v1@{GCP_PROJECT}.iam.gserviceaccount.com" in result.detail
    assert "compute.instances.delete" in result.detail


def test_autostop_with_a_named_head_account_warns_naming_what_it_needs(cluster):
    from orchestrator.providers import gcp

    yaml = with_account(gcp_yaml(), "'https://www.googleapis.com/auth/cloud-platform'") + AUTOSTOP
    [result] = gcp.head_credentials(cluster(yaml))
    assert result.status == WARN
    assert f"head@{GCP_PROJECT}" in result.detail and "compute.instances.delete" in result.detail
    assert "roles/compute.instanceAdmin.v1" in result.hint
    assert result.field == "available_node_types.head.node_config.serviceAccounts" and result.line


def test_autostop_with_a_head_account_scoped_off_compute_fails(cluster):
    from orchestrator.providers import gcp

    yaml = with_account(gcp_yaml(), "'https://www.googleapis.com/auth/devstorage.read_only'")
    [result] = gcp.head_credentials(cluster(yaml + AUTOSTOP))
    assert result.status == FAIL and "do not reach Compute Engine" in result.detail
    assert gcp.head_credentials(cluster(yaml, name="no-autostop.yaml")) == []


def test_autostop_without_an_archive_warns_that_the_logs_go_with_the_head(cluster):
    """On clouds the takedown deletes the head, and with it the head's own archive folder."""
    from orchestrator.providers import cloud

    [result] = cloud.archive_note(cluster(gcp_yaml() + AUTOSTOP))
    assert (result.name, result.status) == ("archive", WARN)
    assert result.detail == ("autostop takes the cluster down from its head; without `archive:` "
                             "the logs are archived on the head's disk and go with it")
    assert result.hint == "set archive: s3://... (the head needs s3:PutObject there)"
    assert result.field == "metadata.orchestrate.autostop"
    archived = AUTOSTOP + "    archive: s3://my-logs/ray\n"   # indented as the text above
    assert cloud.archive_note(cluster(gcp_yaml() + archived, name="archived.yaml")) == []
    assert cloud.archive_note(cluster(gcp_yaml(), name="no-autostop.yaml")) == []
