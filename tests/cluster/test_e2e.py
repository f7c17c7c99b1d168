"""End to end over real SSH and the real Ray cluster launcher: up, use, up again, change, move
the head, down."""
from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

import pytest
import yaml

from orchestrator import contract
from orchestrator.util.waiting import until
from tests.helpers import at_terminal

from .conftest import launch, submit_and_wait

pytestmark = [pytest.mark.ssh, pytest.mark.ray]


def http_status(url: str, headers: dict | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


# Under Ray's own Python: the head's login shell finds another `python` first (see the ssh_cluster fixture).
COUNT_NODES = contract.RAY_PYTHON + ("exec $ray_python -c \"import ray; ray.init(); "
                                     "print('alive nodes:', sum(n['Alive'] for n in ray.nodes()))\"")


def test_up_use_up_again_change_move_down(make_machine, tmp_path):
    # A head and one worker: what is tested is the cluster's life, not its size (the 3-host
    # cluster of tests/cluster/shared_cluster runs a job across three hosts).
    machine = make_machine(count=2)
    handle = launch(machine, tmp_path / "home", f"e2e-{machine.name}")
    try:
        # Two nodes on two addresses, both alive.
        status = json.loads(handle.cli("status", "--format", "json").stdout)
        assert [row["name"] for row in status] == [handle.name]
        live = status[0]["live"]
        assert live["nodes_alive"] == 2
        assert live["node_ips"] == sorted(machine.ips)
        assert handle.token not in json.dumps(status)

        # On-prem as on clouds (issue 29): no address on the LAN is recorded; an authenticated
        # job through the SSH forward to the head's loopback runs on the cluster.
        assert handle.address is None and status[0]["dashboard_host"] == "127.0.0.1"
        with handle.open() as endpoint:
            assert endpoint.via == "ssh-forward"
            logs = submit_and_wait(endpoint.address, handle.headers, COUNT_NODES)
            assert "alive nodes: 2" in logs

            # Without the token (or with a wrong one) the dashboard and job API refuse.
            for path in ("/api/jobs/", "/api/v0/nodes", "/api/version"):
                assert http_status(endpoint.address + path) == 401
                assert http_status(endpoint.address + path,
                                   {"Authorization": "Bearer nope"}) == 403

        # `up` again on the unchanged file: nothing touched, same Ray processes; one SSH login,
        # the forward that asks the head's dashboard (on its loopback since issue 29).
        pids, logins = machine.ray_pids(), machine.accepted_logins()
        assert len(machine.ray_pids("raylet")) == 2 and len(machine.ray_pids("gcs_server")) == 1
        again = handle.cli("up", str(handle.file), "-y", "--format", "json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["action"] == "unchanged"
        assert machine.accepted_logins() == logins + 1
        assert machine.ray_pids() == pids

        # A change of autoscaling settings only: applied with --no-restart, Ray keeps running.
        config = yaml.safe_load(handle.file.read_text())
        # orchestrate's own settings too: `ray up --no-restart` syncs the head's bootstrap
        # config again, where the autostop watcher reads them.
        config["idle_timeout_minutes"] = 9
        config["autostop"] = {"max_uptime_minutes": 600}
        handle.file.write_text(yaml.safe_dump(config))
        gcs = machine.ray_pids("gcs_server")
        assert len(gcs) == 1
        came_up = handle.record()["up_at"]
        changed = handle.cli("up", str(handle.file), "-y", "--format", "json")
        assert changed.returncode == 0, changed.stderr
        result = json.loads(changed.stdout)
        assert result["action"] == "updated"
        assert came_up is not None and result["up_at"] == came_up   # Ray kept running
        assert result["changes"] == ["+ idle_timeout_minutes",   # not in local.yaml before
                                     "+ metadata.orchestrate.autostop.max_uptime_minutes"]
        assert "--no-restart" in changed.stderr
        assert machine.ray_pids("gcs_server") == gcs
        assert result["health"]["session"] == live["session"]
        bootstrap = json.loads(machine.hosts[0].in_host("cat", "/root/ray_bootstrap_config.yaml")
                               .stdout)
        assert bootstrap["metadata"]["orchestrate"]["autostop"] == {"max_uptime_minutes": 600}
        assert machine.hosts[0].pids("head.autostop"), "the watcher is not running on the head"

        # Secrets never show up in what we print or log.
        for text in (again.stdout, again.stderr, changed.stdout, changed.stderr,
                     (handle.home / "clusters" / handle.name / "up.log").read_text(),
                     (handle.home / "clusters" / handle.name / "ray-cluster.yaml").read_text()):
            assert handle.token not in text

        # A change that restarts Ray on the head: at a terminal, `up` lists it and asks first;
        # "no" changes nothing.
        record = handle.record()
        config["head_setup_commands"] = ["echo restart-me"]
        handle.file.write_text(yaml.safe_dump(config))
        code, shown = at_terminal([sys.executable, "-m", "orchestrator", "up", str(handle.file)],
                                  handle.env, {"[y/N]": "n"})
        assert code == 1, shown
        assert f"changes to cluster {handle.name} since the last up:\n  + head_setup_commands\n" \
            in shown
        assert f"Ray on the head of {handle.name} will restart; running jobs will be stopped. " \
               "Continue? [y/N] n\n" in shown
        assert "ERROR cancelled; nothing was changed" in shown and "Traceback" not in shown
        assert machine.ray_pids("gcs_server") == gcs and handle.record() == record

        # With -y it restarts without asking; --no-wait returns once the head is up.
        restarted = handle.cli("up", str(handle.file), "-y", "--no-wait", "--format", "json")
        assert restarted.returncode == 0, restarted.stderr
        result = json.loads(restarted.stdout)
        assert (result["action"], result["changes"]) == ("restarted", ["+ head_setup_commands"])
        assert result["plan"]["jobs_survive"] is False and result["health"] is None
        assert result["state"] == "up" and result["config_hash"] != record["config_hash"]
        # the cost since up counts from the restart; the cluster's creation is kept
        assert result["up_at"] > record["up_at"] and result["created_at"] == record["created_at"]
        new_gcs = machine.ray_pids("gcs_server")
        assert len(new_gcs) == 1 and new_gcs != gcs
        gcs = new_gcs
        # `status NAME` asks the restarted cluster: a new Ray session on the same head, and
        # (--no-wait did not wait for it) the worker back by itself: 2 nodes alive.
        seen: dict = {}

        def whole() -> bool:
            one = handle.cli("status", handle.name, "--format", "json")
            seen.update(code=one.returncode, err=one.stderr, rows=json.loads(one.stdout or "[]"))
            return one.returncode == 0 and [r["live"].get("nodes_alive") for r in seen["rows"]] == [2]
        assert until(whole, timeout=120), seen
        [row] = seen["rows"]
        assert row["name"] == handle.name and row["state"] == "up"
        assert row["live"]["reachable"] is True and row["live"]["session"] != live["session"]
        assert row["head_ip"] == machine.ips[0]

        # A change of where the cluster lives (the on-prem head's address) is a `replace`:
        # the old cluster goes down with the config it was launched with, then the new one
        # comes up, so no Ray is left on the old head.
        first, second = machine.ips
        config["provider"].update(head_ip=second, worker_ips=[first])
        handle.file.write_text(yaml.safe_dump(config))
        moved = handle.cli("up", str(handle.file), "-y", "--format", "json")
        assert moved.returncode == 0, moved.stderr
        result = json.loads(moved.stdout)
        assert result["action"] == "replaced"
        assert result["plan"]["reason"] == "provider.head_ip changed: a new cluster"
        assert result["plan"]["jobs_survive"] is False
        assert "tearing down cluster" in moved.stderr
        assert result["head_ip"] == second and result["address"] is None
        assert result["health"]["nodes_alive"] == 2
        moved_gcs = machine.ray_pids("gcs_server")
        assert len(moved_gcs) == 1 and not moved_gcs & gcs  # the old head's Ray is gone
        status = json.loads(handle.cli("status", "--format", "json").stdout)[0]
        assert status["head_ip"] == second and status["live"]["nodes_alive"] == 2
        assert status["live"]["node_ips"] == sorted(machine.ips)
        # a job on the moved cluster, for `down` to archive (Ray's restarts above emptied the
        # job table: it lives in the head's GCS)
        with handle.open() as endpoint:
            submit_and_wait(endpoint.address, handle.headers, "echo kept-by-down")
    finally:
        down = handle.cli("down", "-y")
    assert down.returncode == 0, down.stderr
    assert handle.record() is None
    assert not (handle.home / "clusters" / handle.name).exists()
    assert not (handle.home / "secrets" / "clusters" / f"{handle.name}.tls").exists()
    assert until(lambda: not machine.ray_pids("ray|gcs_server|raylet"), timeout=30), \
        f"Ray processes of the cluster are still running after down: " \
        f"{machine.ray_processes('ray|gcs_server|raylet')}"

    # Before each `ray down` (the replace's, the last one) the logs were archived by the head's
    # archiver (the file names no location: into the head's folder, then copied into a private
    # folder here; issue 32).
    archives = handle.home / "logs" / "clusters" / handle.name
    kept = sorted(p for p in archives.iterdir() if p.is_dir())
    assert len(kept) == 2 and f"logs archived to {kept[-1]}" in down.stderr, down.stderr
    assert archives.stat().st_mode & 0o777 == 0o700
    [job] = json.loads((kept[-1] / "jobs.json").read_text())   # the job on the moved head
    assert (kept[-1] / "jobs" / f"{job['submission_id']}.log").stat().st_mode & 0o777 == 0o600
    shown = handle.cli("logs", job["submission_id"], "--cluster", handle.name)
    assert shown.returncode == 0 and "kept-by-down" in shown.stdout, shown.stderr
