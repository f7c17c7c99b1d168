"""The providers the orchestrator supports: one explicit registry.

The cluster schema's `provider.type` enum is generated from this dict (scripts/build_schemas.py),
and the preflight registry must cover the same keys (tests check both), so they cannot drift.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProviderInfo:
    title: str
    required: tuple  # provider fields Ray needs in practice but its schema does not require
    extra: str | None  # the pip extra holding the provider's SDK
    cloud: bool  # True: the dashboard must stay on the head's loopback


PROVIDERS = {
    "aws": ProviderInfo("Amazon Web Services (EC2)", ("region",), "aws", True),
    "gcp": ProviderInfo(
        "Google Cloud (Compute Engine)", ("region", "availability_zone", "project_id"), "gcp", True
    ),
    "azure": ProviderInfo("Microsoft Azure (VMs)", ("location", "resource_group"), "azure", True),
    "local": ProviderInfo("On-premises hosts over SSH", ("head_ip", "worker_ips"), None, False),
}
