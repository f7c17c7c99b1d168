"""A fresh `orchestrate up` against raw `ray up` of the same rendered config on the same hosts.

    sudo .venv/bin/python benchmarks/up_vs_ray_up.py [--rounds 5] [--workers 0]

The hosts are the test suite's simulated machines (tests/cluster/hosts.py: network and PID
namespaces, each with its own sshd), and the file is cluster_configs/local.yaml with their
addresses: a `local` cluster of a head (and `--workers` workers). By default the cluster is a head
alone: what is compared is the launch itself, which is orchestrate's own overhead; how fast Ray's
autoscaler then brings workers is the same on both sides. (With workers, `ray down` of a `local`
cluster leaves the workers' Ray running, so after each side every host is restarted.) Each round,
in alternating order:
- orchestrate: `orchestrate up FILE -y` from start to exit (it renders, preflights, runs `ray up`
  and returns once every node is alive), then `orchestrate down`;
- ray: `ray up RENDERED -y` of the config orchestrate rendered (same token file mount, same start
  commands), then polling the dashboard every 0.5 s until every node is alive, as `orchestrate
  up` does; then `ray down`.
After each side every host is restarted (all its processes killed), so each `up` starts bare.
Prints min / median / max per side and the ratio of medians (target <= 1.05). Needs root.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sides import ROOT, spread

from orchestrator.cluster.health import probe
from orchestrator.reach.endpoint import Endpoint
from tests.cluster.hosts import Network, local_cluster


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.monotonic() - start


def wait_nodes(address: str, token: str, expected: int) -> None:
    endpoint = Endpoint(address, token, "benchmark")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            if probe(endpoint, timeout=5).nodes_alive >= expected:
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    sys.exit(f"{expected} nodes did not come up at {address}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: makes network and PID namespaces for the hosts")
    import yaml

    work = Path(tempfile.mkdtemp(prefix="orc-bench-up-"))
    network = Network.create(work / "hosts", 1 + args.workers)
    try:
        ips = [host.ip for host in network.hosts]
        name = "bench-up"
        file = work / "cluster.yaml"
        file.write_text(yaml.safe_dump(local_cluster(name, network)))
        home = work / "home"
        env = dict(os.environ, ORCHESTRATE_HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
        orchestrate = [sys.executable, "-m", "orchestrator"]

        # One `up` first, untimed: it renders the config the raw side launches and warms caches.
        result = subprocess.run([*orchestrate, "up", str(file), "-y", "--format", "json"], env=env,
                                capture_output=True, text=True, check=True)
        address = json.loads(result.stdout)["address"]
        rendered = json.loads((home / "clusters" / name / "ray-cluster.yaml").read_text())
        token_file = work / "token"
        shutil.copy(home / "secrets" / "clusters" / name, token_file)
        token_file.chmod(0o600)
        # The gRPC TLS material `up` made (a CA and a node certificate), kept for the raw side:
        # `down` deletes it with the token.
        tls = Path(f"{token_file}.tls")
        shutil.copytree(home / "secrets" / "clusters" / f"{name}.tls", tls)
        kept = {f"/clusters/{name}": str(token_file), f"/clusters/{name}.tls": str(tls)}
        rendered["file_mounts"] = {
            k: next((mine for end, mine in kept.items() if v.rstrip("/").endswith(end)), v)
            for k, v in rendered["file_mounts"].items()}
        raw_file = work / "ray-cluster.yaml"
        raw_file.write_text(json.dumps(rendered))
        timed([*orchestrate, "down", name, "-y"], env)
        raw_env = dict(env, RAY_TMPDIR=str(work / "ray-tmp"))
        (work / "ray-tmp").mkdir()
        ray = str(Path(sys.executable).parent / "ray")

        def clean() -> None:
            """Every side starts from hosts without Ray: `ray down` of a `local` cluster leaves
            the workers' Ray running (orchestrate's `down` stops them over SSH)."""
            for host in network.hosts:
                host.kill()
                host.start()

        def raw_up() -> float:
            start = time.monotonic()
            timed([ray, "up", str(raw_file), "-y", "--no-config-cache"], raw_env)
            wait_nodes(address, token_file.read_text().strip(), len(ips))
            seconds = time.monotonic() - start
            timed([ray, "down", str(raw_file), "-y"], raw_env)
            clean()
            return seconds

        def orchestrate_up() -> float:
            seconds = timed([*orchestrate, "up", str(file), "-y"], env)
            timed([*orchestrate, "down", name, "-y"], env)
            clean()
            return seconds

        results: dict[str, list[float]] = {"orchestrate": [], "ray up": []}
        sides = (("orchestrate", orchestrate_up), ("ray up", raw_up))
        for i in range(args.rounds):
            for side, step in sides if i % 2 == 0 else sides[::-1]:
                results[side].append(step())
            print(f"round {i}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in results.items()),
                  flush=True)
    finally:
        network.close()
    print(f"\nfresh up of a head and {args.workers} workers ({args.rounds} rounds):")
    for side, values in results.items():
        print(f"  {side:<12} {spread(values)}")
    ratio = statistics.median(results["orchestrate"]) / statistics.median(results["ray up"])
    print(f"ratio of medians: {ratio:.3f} (target <= 1.05)")
    print(f"reproduce: {sys.executable} {ROOT / 'benchmarks' / 'up_vs_ray_up.py'} --rounds {args.rounds} "
          f"--workers {args.workers}")


if __name__ == "__main__":
    main()
