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


def test_what_a_backend_can_do_is_asked_by_feature_not_by_name(tmp_path, monkeypatch):
    """Each Feature belongs to the backends that have it; a provider orchestrate does not know
    (a state's record is data) has none; a job on a cluster of its own is only asked of a
    backend that can run one."""
    import pytest

    from orchestrator.errors import ClusterError
    from orchestrator.state import State

    kuberay = launch.features("kuberay")
    assert {launch.Feature.RESOURCE, launch.Feature.JOB_ON_OWN_CLUSTER,
            launch.Feature.SERVICE_RESOURCE, launch.Feature.HEAD_THROUGH_API} <= kuberay
    assert launch.Feature.SHELL_ON_HEAD not in kuberay
    for name in ("aws", "gcp", "azure", "local"):
        assert launch.features(name) == {launch.Feature.SHELL_ON_HEAD}, name
    assert launch.features("openstack") == frozenset()

    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path))
    on_prem = ClusterRecord(name="c", provider="local", file="c.yaml", config_hash="")
    with pytest.raises(ClusterError, match="local clusters cannot run a job on a cluster of"):
        launch.jobs_on_own_cluster(on_prem, State.here())
    kube = ClusterRecord(name="k", provider="kuberay", file="k.yaml", config_hash="")
    runner = launch.jobs_on_own_cluster(kube, State.here())
    assert callable(runner.submit_job) and callable(runner.follow_job)
