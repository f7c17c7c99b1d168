"""Autostop's takedown of a cloud cluster, run on its own head: Ray's autoscaler, then Ray stopped
here, then every node of the cluster stopped or terminated through Ray's node provider, workers
first, this head last.

    cd ~/.orchestrate && python -m head.cloud_down [~/ray_bootstrap_config.yaml]

Why not `ray down -y ~/ray_bootstrap_config.yaml` as it is (Ray's `teardown_cluster`, read in
Ray 2.60's autoscaler/_private/commands.py):
- it first runs `ray stop` on the head over SSH (`exec_cluster`): from the head that is an SSH to
  its own address, bounded only by `ConnectTimeout=120s`, and before it Ray waits up to
  `AUTOSCALER_NODE_START_WAIT_S` (900 s) for an IP the head may not have (a head without a public
  address and no `use_internal_ips`);
- it re-runs the launcher's bootstrap (`_bootstrap_config`), which on AWS asks IAM for the
  instance profile when the head's node config names none (Ray moves it out of the copy it leaves
  on the head), and Ray's default head role `ray-autoscaler-v1` may not read IAM: "not
  authorized to perform: iam:GetInstanceProfile" (ray-project/ray#17322), so nothing is removed.
So this does what `teardown_cluster` does after those two steps, with the same provider the head's
autoscaler uses (`_get_node_provider` on the bootstrap config) and so the same credentials and the
same meaning: `cache_stopped_nodes` (AWS's default: true) stops on-demand instances, else they
are terminated. Every step is bounded.

The head stops or terminates itself last: the process may die at any point after that request,
so everything worth saying is logged before it. It must run outside Ray's process tree: `ray
stop` picks processes by name (Ray's RAY_PROCESSES), which `python -m head.cloud_down` matches none
of, and its own `ray stop` runs in a session of its own. Azure's shared resources (the managed
identity, network security group, virtual network) are not removed from the head: that needs the
identity the head runs as; a later `ray down` from a workstation removes them.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

DEFAULT_CONFIG = "~/ray_bootstrap_config.yaml"
STOP_TIMEOUT_S = 90                       # `ray stop` waits 16 s per default grace, then kills
WAIT_S = (1, 2, 4, 8, 15, 30, 30, 30)     # polls for the workers to go: about 2 minutes in all
TAIL = 40                                 # lines of `ray stop`'s output logged


def down(bootstrap_path: str, log: Callable[[str], None]) -> int:
    """Take the whole cluster described by the bootstrap config down; 0 when every worker is
    gone and this head's own stop/termination was accepted (it may not return at all then)."""
    path = os.path.expanduser(bootstrap_path)
    log(f"taking the cluster down from this head ({path}): Ray's autoscaler then Ray stopped "
        "here, then the workers, then this head, through Ray's node provider")
    try:
        config = _load(path)
    except (OSError, ValueError) as exc:
        log(f"cannot read the bootstrap config {path}: {exc}")
        return 1
    _stop_autoscaler(log)
    _stop_ray(log)
    try:
        return _remove_nodes(config, log)
    except Exception as exc:  # noqa: BLE001 - any SDK error: said; the cluster stays for `down`
        log(f"the takedown failed: {type(exc).__name__}: {exc}")
        return 1


def _load(path: str) -> dict[str, Any]:
    import yaml  # a Ray dependency; Ray writes the bootstrap config as JSON, which YAML reads

    with open(path) as f:
        config = yaml.safe_load(f)
    if not isinstance(config, dict) or "provider" not in config or "cluster_name" not in config:
        raise ValueError("not a Ray cluster config (no provider or cluster_name)")
    return config


# Ray's autoscaler on the head (v1 and v2 alike: ray/autoscaler/{_private,v2}/monitor.py)
AUTOSCALER = ("autoscaler/_private/monitor.py", "autoscaler/v2/monitor.py")
AUTOSCALER_STOP_S = 10


def _autoscalers() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                line = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:   # gone meanwhile, or not ours to read
            continue
        if any(name in line for name in AUTOSCALER):
            found.append(int(entry))
    return found


def _stop_autoscaler(log: Callable[[str], None]) -> None:
    """Ray's autoscaler stopped before the rest of Ray: `ray stop` ends the raylet first, and the
    autoscaler (v2), seeing the head's Ray stopped, terminates the head's own instance while it
    still runs, before this takedown has removed the workers, which are left running (found on
    the simulated AWS, tests/cluster/test_cloud_aws.py). SIGTERM, then SIGKILL after a wait."""
    import signal

    pids = _autoscalers()
    if not pids:
        log("Ray's autoscaler is not running here")
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + AUTOSCALER_STOP_S
        while time.monotonic() < deadline and (pids := [p for p in pids
                                                        if p in _autoscalers()]):
            time.sleep(0.2)
        if not pids:
            log("Ray's autoscaler stopped, so that it neither replaces the workers nor ends "
                "this head while they are removed")
            return
    log(f"Ray's autoscaler (pid {', '.join(map(str, pids))}) did not stop; going on")


def _stop_ray(log: Callable[[str], None]) -> None:
    """`ray stop` here, first, as `ray down` does: the autoscaler must not replace the workers
    being removed. Ray's own failure or a timeout is logged and the takedown goes on (so does
    Ray's)."""
    command = [sys.executable, "-m", "ray.scripts.scripts", "stop"]
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=STOP_TIMEOUT_S, start_new_session=True)
    except subprocess.TimeoutExpired:
        log(f"`ray stop` did not finish in {STOP_TIMEOUT_S} s; going on")
        return
    except OSError as exc:
        log(f"`ray stop` could not run ({exc}); going on")
        return
    lines = (done.stdout + done.stderr).splitlines()[-TAIL:]
    log(f"`ray stop` exited {done.returncode}" + "".join(f"\n  {line}" for line in lines))


def _remove_nodes(config: dict[str, Any], log: Callable[[str], None]) -> int:
    from ray.autoscaler._private.providers import _get_node_provider
    from ray.autoscaler.tags import NODE_KIND_HEAD, NODE_KIND_WORKER, TAG_RAY_NODE_KIND

    provider = _get_node_provider(config["provider"], config["cluster_name"], use_cache=False)
    workers = {TAG_RAY_NODE_KIND: NODE_KIND_WORKER}
    left = provider.non_terminated_nodes(workers)
    for wait in WAIT_S:
        if not left:
            break
        log(f"removing {len(left)} worker(s): {', '.join(sorted(left))}")
        provider.terminate_nodes(left)
        time.sleep(wait)
        left = provider.non_terminated_nodes(workers)
    if left:
        log(f"workers still there after the takedown's wait: {', '.join(sorted(left))}; "
            "the head stays up so that the cluster is still found; run `orchestrate down`")
        return 1
    heads = provider.non_terminated_nodes({TAG_RAY_NODE_KIND: NODE_KIND_HEAD})
    if not heads:   # this code runs on the head: it is there, but not found by its tags
        log("the head (this machine) was not found among the cluster's nodes by its tags; "
            "it stays up: run `orchestrate down`")
        return 1
    log(f"no worker left; removing the head {', '.join(sorted(heads))} (this machine): the "
        "takedown ends here")
    provider.terminate_nodes(heads)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: python -m head.cloud_down [BOOTSTRAP_CONFIG]", file=sys.stderr)
        return 2

    def log(message: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        print(f"{stamp} cloud_down: {message}", file=sys.stderr, flush=True)

    return down(argv[0] if argv else DEFAULT_CONFIG, log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
