"""The price catalog (orchestrator.providers.prices) and cluster prices (providers.cost), on the
example cluster files and on hand-made configs. Figures are rows of the shipped catalog (each
test's ORCHESTRATE_HOME is new: no cached full catalog; that one: test_prices_refresh.py)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from orchestrator.language.cluster import load_cluster
from orchestrator.providers import azure, prices
from orchestrator.providers.cost import ClusterPrice, NodePrice, cluster_price, money

EXAMPLES = Path(__file__).resolve().parents[2] / "cluster_configs"


def example(name: str) -> dict:
    return copy.deepcopy(load_cluster(EXAMPLES / name, here=False).document)


def test_lookup_on_demand_is_per_region_and_spot_per_zone():
    # aws.csv: g5.xlarge us-west-2 spot 0.3739 (usw2-az1), 0.357 (az2), 0.3644 (az3)
    assert prices.lookup("aws", "g5.xlarge", "us-west-2") == 1.006
    assert prices.lookup("aws", "g5.xlarge", "us-west-2", spot=True) == 0.3739   # the highest
    assert prices.lookup("aws", "g5.xlarge", "us-west-2", "usw2-az2", spot=True) == 0.357
    assert prices.lookup("aws", "g5.xlarge", "us-west-2", "usw2-az9", spot=True) == 0.3739
    assert prices.lookup("aws", "g5.xlarge", "eu-central-1") is None
    assert prices.lookup("aws", "g9.xlarge", "us-west-2") is None
    assert prices.lookup("nocloud", "g5.xlarge", "us-west-2") is None
    assert prices.lookup("azure", "Standard_NC4as_T4_v3", "eastus", spot=True) == 0.062699
    assert prices.accelerator("gcp", "nvidia-tesla-t4", 1, "us-central1", "us-central1-a") == 0.35
    assert prices.accelerator("gcp", "nvidia-tesla-t4", 3, "us-central1") is None   # no such row


def test_a_zone_without_a_spot_price_is_unknown():
    # aws.csv: m6i.large us-west-2 usw2-az4 has no spot figure
    assert prices.lookup("aws", "m6i.large", "us-west-2", "usw2-az4", spot=True) is None
    assert prices.lookup("aws", "m6i.large", "us-west-2", spot=True) is not None


def test_the_catalog_names_its_source_and_date():
    # No `orchestrate prices refresh` on this test's ORCHESTRATE_HOME: the shipped subset.
    assert prices.source("aws") == (
        "list prices of 2026-11-26 (skypilot-catalog, the subset shipped with orchestrate: "
        "3 regions; `orchestrate prices refresh` fetches all)")
    assert "2 regions" in prices.source("azure")         # no westeurope in SkyPilot's v6 file
    assert prices.subset_hint("gcp") == (
        " (the shipped catalog is a subset: `orchestrate prices refresh` fetches the full one)")


def test_aws_example_head_on_demand_spot_workers_at_most_max_workers():
    price = cluster_price(example("aws-gpu.yaml"))
    head, gpu = 0.384, 0.3739     # m5.2xlarge on-demand; g5.xlarge spot, highest in us-west-2
    assert price.nodes["head"] == NodePrice("head", "m5.2xlarge", "us-west-2", False, head)
    assert price.nodes["gpu_worker"] == NodePrice("gpu_worker", "g5.xlarge", "us-west-2", True, gpu)
    assert price.at_min == pytest.approx(head)
    assert price.at_max == pytest.approx(head + 8 * gpu)
    assert price.hourly({"gpu_worker": 3}) == pytest.approx(head + 3 * gpu)
    assert price.warnings == ()
    assert price.source == prices.source("aws")
    assert cluster_price(example("aws-shorthand.yaml")).at_max == pytest.approx(head + 8 * gpu)


def test_aws_on_demand_workers_without_market_options():
    config = example("aws-gpu.yaml")
    del config["available_node_types"]["gpu_worker"]["node_config"]["InstanceMarketOptions"]
    assert cluster_price(config).at_max == pytest.approx(0.384 + 8 * 1.006)


def test_the_worst_case_takes_the_priciest_types_first_under_max_workers():
    config = example("aws-gpu.yaml")
    config["max_workers"] = 10
    config["available_node_types"]["cpu"] = {
        "node_config": {"InstanceType": "m5.2xlarge"}, "min_workers": 1, "max_workers": 5}
    price = cluster_price(config)
    assert price.at_min == pytest.approx(0.384 + 0.384)
    # m5.2xlarge on-demand (0.384) before g5.xlarge spot (0.3739): 5 of them, then 5 g5
    assert price.at_max == pytest.approx(0.384 + 5 * 0.384 + 5 * 0.3739)


def test_an_unknown_instance_type_warns_and_makes_every_total_that_counts_it_unknown():
    config = example("aws-gpu.yaml")
    config["provider"]["region"] = "us-east-1"
    config["available_node_types"]["gpu_worker"]["node_config"]["InstanceType"] = "g9.xlarge"
    price = cluster_price(config)
    assert price.warnings == (
        "available_node_types.gpu_worker.node_config.InstanceType: spot g9.xlarge in us-east-1 "
        "is not in the price catalog; its price is unknown" + prices.subset_hint("aws"),)
    assert price.nodes["gpu_worker"].hourly is None
    assert price.at_min == pytest.approx(0.384)       # no gpu worker counted at the minimum
    assert price.at_max is None
    assert price.hourly({"gpu_worker": 1}) is None
    assert price.hourly({"gpu_worker": 0}) == pytest.approx(0.384)
    assert money(price.at_max) == "unknown"


def test_ray_default_node_types_are_priced_when_the_file_names_none():
    price = cluster_price(example("azure.yaml"))      # Standard_D2s_v3: not in the catalog
    assert set(price.nodes) == {"ray.head.default", "ray.worker.default"}
    assert price.nodes["ray.worker.default"].spot is True
    assert price.at_min is None and price.at_max is None
    assert price.warnings[0].startswith(
        "available_node_types.ray.head.default.node_config.azure_arm_parameters.vmSize: "
        "Standard_D2s_v3 in westus2 is not in the price catalog")
    assert price.warnings[0].endswith("(Ray's default node type: the file names none)")
    gcp = cluster_price(example("gcp.yaml"))
    assert gcp.nodes["ray_head_default"].instance == "n1-standard-2"
    assert gcp.nodes["ray_worker_small"].spot is True


def test_azure_spot_priority():
    config = example("azure.yaml")
    config["provider"]["location"] = "eastus"
    config.update(head_node_type="head", max_workers=2, available_node_types={
        "head": {"node_config": {"azure_arm_parameters": {"vmSize": "Standard_D4s_v5"}}},
        "t4": {"min_workers": 1, "max_workers": 2, "node_config": {"azure_arm_parameters": {
            "vmSize": "Standard_NC4as_T4_v3", "priority": "Spot"}}}})
    price = cluster_price(config)
    assert price.nodes["t4"] == NodePrice("t4", "Standard_NC4as_T4_v3", "eastus", True, 0.062699)
    assert price.at_min == pytest.approx(0.192 + 0.062699)
    assert price.at_max == pytest.approx(0.192 + 2 * 0.062699)
    # the shorthand's `spot: true` renders to the same priority
    shorthand = azure.node_config({"instance_type": "Standard_NC4as_T4_v3", "spot": True})
    assert azure.node_price(config, "t4", {"node_config": shorthand}).hourly == 0.062699


def test_gcp_attached_gpus_add_to_the_machine_in_the_zone():
    price = cluster_price(example("gcp-gpu.yaml"))
    # n1-standard-8 us-central1-a: 0.38, spot 0.0963; T4 x1 there: 0.35, spot 0.14
    assert price.nodes["t4"] == NodePrice("t4", "n1-standard-8", "us-central1", True,
                                          pytest.approx(0.0963 + 0.14))
    assert price.at_max == pytest.approx(0.38 + 4 * (0.0963 + 0.14))
    config = example("gcp-gpu.yaml")
    config["available_node_types"]["t4"]["node_config"]["scheduling"] = {
        "onHostMaintenance": "TERMINATE"}                           # the API's dict form, on-demand
    assert cluster_price(config).nodes["t4"].hourly == pytest.approx(0.38 + 0.35)
    config["available_node_types"]["t4"]["node_config"]["scheduling"]["provisioningModel"] = "SPOT"
    assert cluster_price(config).nodes["t4"].spot is True


def test_gcp_machine_types_that_carry_gpus_include_them():
    config = example("gcp-gpu.yaml")
    node_config = config["available_node_types"]["t4"]["node_config"]
    node_config["machineType"] = "a2-highgpu-2g"
    del node_config["guestAccelerators"], node_config["scheduling"]
    host = prices.lookup("gcp", "a2-highgpu-2g", "us-central1")
    gpus = prices.accelerator("gcp", "nvidia-tesla-a100", 2, "us-central1")
    assert host and gpus
    assert cluster_price(config).nodes["t4"].hourly == pytest.approx(host + gpus)


def test_gcp_an_unknown_accelerator_names_its_field():
    config = example("gcp-gpu.yaml")
    config["available_node_types"]["t4"]["node_config"]["guestAccelerators"][0][
        "acceleratorType"] = "nvidia-h100-80gb"
    price = cluster_price(config)
    assert price.nodes["t4"].hourly is None and price.at_max is None
    assert price.warnings == (
        "available_node_types.t4.node_config.guestAccelerators.0.acceleratorType: spot 1 x "
        "nvidia-h100-80gb in us-central1 is not in the price catalog; its price is unknown"
        + prices.subset_hint("gcp"),)


def onprem(**settings) -> dict:
    return {"cluster_name": "onprem", "max_workers": 2,
            "provider": {"type": "local", "head_ip": "10.0.0.1",
                         "worker_ips": ["10.0.0.2", "10.0.0.3"]},
            "metadata": {"orchestrate": {"host_price_per_hour": 0.5}}, **settings}


def test_onprem_hosts_at_the_file_s_price():
    price = cluster_price(onprem())
    assert price.head_type == "local.cluster.node"
    assert price.nodes == {"local.cluster.node": NodePrice("local.cluster.node", "host", "", False, 0.5)}
    assert (price.at_min, price.at_max) == (1.5, 1.5)     # min_workers defaults to the hosts
    assert price.source == "prices given in the file" and price.warnings == ()
    partial = cluster_price(onprem(min_workers=1))
    assert (partial.at_min, partial.at_max) == (1.0, 1.5)
    assert partial.hourly({"local.cluster.node": 1}) == 1.0
    assert cluster_price(example("local.yaml")).at_max == 0.0     # no price given: 0


def test_money():
    assert money(1.234) == "$1.23/h"
    assert money(0) == "$0.00/h"
    assert money(None) == "unknown"
    assert ClusterPrice("h", {}, None, None, (), "").hourly({}) is None
