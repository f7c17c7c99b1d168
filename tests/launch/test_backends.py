"""Launch backends: each provider names one, and one function builds it."""
from __future__ import annotations

from orchestrator import launch, providers
from orchestrator.launch.ray_up.backend import RayUp
from orchestrator.state import ClusterRecord


def test_every_provider_names_a_launch_backend():
    for name, module in providers.PROVIDERS.items():
        assert module.LAUNCH in launch.BACKENDS, name


def test_the_backend_of_a_record_is_its_providers(tmp_path, monkeypatch):
    from orchestrator.state import State

    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path))
    record = ClusterRecord(name="c", provider="local", file="c.yaml", config_hash="")
    built = launch.backend(record, State.here())
    assert isinstance(built, RayUp)
    assert built.command("up") == "`ray up`"
    assert built.environment("c", "local")["RAY_UP_enable_autoscaler_v2"] == "0"
    assert "RAY_UP_enable_autoscaler_v2" not in built.environment("c", "aws")
