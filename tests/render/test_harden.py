"""Hardening: token auth on every `ray start`, and the dashboard where the provider wants it."""
from __future__ import annotations

from orchestrator import providers
from orchestrator.render.harden import Dashboard, harden_ray_config, tls_folder

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


LOCAL = {"cluster_name": "l", "provider": {"type": "local", "head_ip": "10.0.0.5",
                                            "worker_ips": ["10.0.0.6"]}}


def test_harden_local_binds_the_dashboard_to_the_heads_loopback():
    """Issue 29: on-prem, the job API (and the token sent to it) is not on the LAN in clear."""
    hardened, dashboard = harden_ray_config(LOCAL, provider=providers.get("local"),
                                            token_file="/t")
    assert hardened["head_start_ray_commands"][-1].endswith("--dashboard-host=127.0.0.1; }; }")
    assert "10.0.0.5" not in " ".join(hardened["head_start_ray_commands"])
    assert dashboard == Dashboard("127.0.0.1", 8265) and dashboard.tunneled


def test_harden_local_runs_rays_grpc_with_tls_from_the_folder_beside_the_token():
    hardened, _ = harden_ray_config(LOCAL, provider=providers.get("local"),
                                    token_file="/home/u/.orchestrate/secrets/clusters/l")
    folder = "/home/u/.orchestrate/secrets/clusters/l.tls"
    assert tls_folder("/home/u/.orchestrate/secrets/clusters/l") == folder
    assert hardened["file_mounts"] == {"~/.ray/auth_token": "/home/u/.orchestrate/secrets/clusters/l",
                                       "~/.ray/tls": folder}
    for command in hardened["head_start_ray_commands"] + hardened["worker_start_ray_commands"]:
        assert command.startswith("export RAY_AUTH_MODE=token; ")
        assert ("RAY_USE_TLS=1" in command) == ("ray start" in command), command
    start = hardened["worker_start_ray_commands"][-1]
    for variable, file in (("RAY_TLS_CA_CERT", "ca.crt"), ("RAY_TLS_SERVER_CERT", "node.crt"),
                           ("RAY_TLS_SERVER_KEY", "node.key")):
        assert f"{variable}=$HOME/.ray/tls/{file}" in start.split("; ")[1].split()
    assert "BEGIN" not in str(hardened)   # paths only, never a key or certificate


def test_no_tls_where_the_nodes_addresses_are_unknown_before_launch():
    cloud, _ = harden_ray_config(CLOUD, provider=providers.get("aws"), token_file="/t")
    coordinator = {"cluster_name": "l", "max_workers": 2,
                   "provider": {"type": "local", "coordinator_address": "10.0.0.1:1234"}}
    with_coordinator, _ = harden_ray_config(coordinator, provider=providers.get("local"),
                                            token_file="/t")
    for hardened in (cloud, with_coordinator):
        assert "RAY_USE_TLS" not in str(hardened) and "~/.ray/tls" not in hardened["file_mounts"]


def test_the_dashboard_host_is_never_taken_from_the_head_address():
    config = {"cluster_name": "l", "provider": {"type": "local", "head_ip": "a b;id",
                                                 "worker_ips": []}}
    start, _ = harden_ray_config(config, provider=providers.get("local"), token_file="/t")
    assert start["head_start_ray_commands"][-1].endswith("--dashboard-host=127.0.0.1; }; }")


def test_a_failed_ray_start_is_stopped_and_tried_once_more(tmp_path):
    """Ray's `ray start` fails on a loaded host (its fixed waits for the dashboard agent's ports
    and the raylet's registration): the hardened command, run by bash with a `ray` that fails
    its first start, says so, runs `ray stop --force` and starts again; a second failure is the
    command's failure."""
    import os
    import subprocess

    config = {**CLOUD, "head_start_ray_commands": [
        f"ray stop; {tmp_path}/bin/ray start --head --port=6379 --block",
        f"ray stop; RAY_X='a b' {tmp_path}/bin/ray start --head --port=6379"]}
    hardened, _ = harden_ray_config(config, provider=providers.get("aws"), token_file="/t")
    blocking, start = hardened["head_start_ray_commands"]
    assert "ray stop --force" not in blocking   # Ray kept in the foreground: left alone
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "ray"
    fake.write_text("#!/bin/sh\necho \"$* X=$RAY_X\" >> \"$LOG\"\n"
                    "[ \"$1\" != start ] || [ -e \"$LOG.ok\" ] || { touch \"$LOG.ok\"; "
                    "[ -z \"$FAIL\" ] || rm \"$LOG.ok\"; exit 1; }\n")
    fake.chmod(0o755)
    for fail, code in (("", 0), ("always", 1)):
        log = tmp_path / f"log-{code}"
        env = {**os.environ, "LOG": str(log), "FAIL": fail,
               "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
        done = subprocess.run(["bash", "-c", start], env=env, capture_output=True, text=True)
        assert done.returncode == code, done.stderr
        assert "ray start failed; stopping what it started and trying once more" in done.stderr
        starts = "start --head --port=6379 --disable-usage-stats --dashboard-host=127.0.0.1 X=a b"
        assert log.read_text().splitlines() == ["stop X=", starts, "stop --force X=", starts]
