"""Hardening: token auth on every `ray start`, and the dashboard where the provider wants it."""
from __future__ import annotations

from orchestrator import providers
from orchestrator.render.harden import Dashboard, harden_ray_config

CLOUD = {
    "cluster_name": "c", "provider": {"type": "aws", "region": "us-west-2"},
    "head_start_ray_commands": [
        "ray stop",
        "ulimit -n 65536; ray start --head --port=6379 --dashboard-host=0.0.0.0 "
        "--autoscaling-config=~/ray_bootstrap_config.yaml",
    ],
}


def test_harden_cloud_binds_dashboard_to_loopback_and_enables_tokens():
    hardened, dashboard = harden_ray_config(CLOUD, provider=providers.get("aws"),
                                            token_file="/state/c/auth_token")
    assert CLOUD["head_start_ray_commands"][1].count("0.0.0.0") == 1  # input untouched
    start = hardened["head_start_ray_commands"][1]
    assert "--dashboard-host=127.0.0.1" in start and "0.0.0.0" not in start
    assert dashboard == Dashboard("127.0.0.1", 8265) and dashboard.tunneled
    assert "--disable-usage-stats" in start
    for command in hardened["head_start_ray_commands"] + hardened["worker_start_ray_commands"]:
        assert command.startswith("export RAY_AUTH_MODE=token; ")
    worker = hardened["worker_start_ray_commands"][-1]
    assert "ray start --address=$RAY_HEAD_IP:6379" in worker and "--dashboard-host" not in worker
    assert hardened["file_mounts"] == {"~/.ray/auth_token": "/state/c/auth_token"}
    again = harden_ray_config(CLOUD, provider=providers.get("aws"),
                              token_file="/state/c/auth_token")
    assert again == (hardened, dashboard)


def test_harden_local_keeps_the_users_dashboard_host_or_uses_the_head_address():
    config = {"cluster_name": "l", "provider": {"type": "local", "head_ip": "10.0.0.5",
                                                 "worker_ips": ["10.0.0.6"]}}
    local = providers.get("local")
    hardened, dashboard = harden_ray_config(config, provider=local, token_file="/t")
    assert hardened["head_start_ray_commands"][-1].endswith("--dashboard-host=10.0.0.5")
    assert dashboard == Dashboard("10.0.0.5", 8265) and not dashboard.tunneled
    config["head_start_ray_commands"] = ["ray start --head --dashboard-host 0.0.0.0 "
                                         "--dashboard-port=9000"]
    hardened, dashboard = harden_ray_config(config, provider=local, token_file="/t")
    assert "--dashboard-host 0.0.0.0" in hardened["head_start_ray_commands"][0]
    assert dashboard == Dashboard("0.0.0.0", 9000)


def test_the_dashboard_host_is_quoted_in_the_start_command():
    config = {"cluster_name": "l", "provider": {"type": "local", "head_ip": "a b;id",
                                                 "worker_ips": []}}
    start, _ = harden_ray_config(config, provider=providers.get("local"), token_file="/t")
    assert start["head_start_ray_commands"][-1].endswith("--dashboard-host='a b;id'")
