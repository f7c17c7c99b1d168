"""`orchestrate plan` of a project that has not changed, against the cheapest command that reads
the same files, and the no-op `apply` of a project holding one live cluster.

    .venv/bin/python benchmarks/plan_vs_validate.py [--rounds 5] [--no-live]

1. plan vs validate. A project of 100 `local`-provider cluster files (c000..c099, a head and two
   workers each, on addresses nobody has) and 200 experiment files in the shape of
   experiments/quickstart.yaml (e000..e199, each on one of the clusters), sharing a tiny CSV. Its
   state is written directly through the library as an apply of every file would have left it
   (as tests/gitops/test_planner.py's `applied()` builds it), so no cluster is launched and the
   plan has no changes. Each round, in alternating order, from start to exit:
   - plan: `orchestrate plan --refresh=false --detailed-exitcode` in the project (must exit 0);
   - validate: `orchestrate validate clusters experiments` in the project (must exit 0).
   Target: ratio of medians (plan / validate) <= 1.5.
2. no-op apply (needs root; skipped with --no-live or when not root). The host is one of the test
   suite's simulated machines (tests/cluster/hosts.py), as in up_vs_ray_up.py; the cluster is a
   head alone (cluster_configs/local.yaml with its address), its file in a project folder. One
   `orchestrate apply -y` launches it (untimed); then each round, in alternating order:
   - apply: `orchestrate apply -y` in the project (must exit 0 and say "No changes");
   - up: `orchestrate up FILE -y` of the same file, the single-file no-op.
   Target: the apply's median <= 1.5 s (absolute). Finally `orchestrate down NAME -y` in the
   project takes the cluster down (and out of the project's state).
Prints min / median / max per side and the ratio of medians; never the best round.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sides import ROOT, spread

CLUSTERS, EXPERIMENTS = 100, 200
ORCHESTRATE = [sys.executable, "-m", "orchestrator"]


def timed(command: list[str], env: dict[str, str], cwd: Path,
          expect: str | None = None) -> float:
    """Seconds from start to exit; exits the benchmark if the command fails or does not print
    `expect`."""
    start = time.monotonic()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if done.returncode != 0 or (expect and expect not in done.stdout + done.stderr):
        sys.exit(f"failed (exit {done.returncode}"
                 + (f", no {expect!r} in its output" if expect else "") + f"): "
                 f"{' '.join(command)} in {cwd}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds


def alternate(rounds: int, sides: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Each side once per round, the first side first in even rounds and last in odd ones."""
    results: dict[str, list[float]] = {side: [] for side in sides}
    order = list(sides.items())
    for i in range(rounds):
        for side, step in order if i % 2 == 0 else order[::-1]:
            results[side].append(step())
        print(f"round {i}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in results.items()),
              flush=True)
    return results


def report(title: str, results: dict[str, list[float]]) -> None:
    print(f"\n{title}:")
    for side, values in results.items():
        print(f"  {side:<10} {spread(values, 2)}")


# --- 1. plan vs validate ---------------------------------------------------------------------

def write_project(root: Path) -> None:
    import yaml

    (root / "clusters").mkdir(parents=True)
    (root / "experiments" / "data").mkdir(parents=True)
    (root / "orchestrate.yaml").write_text(yaml.safe_dump(
        {"project": "bench-plan", "include": ["clusters/*.yaml", "experiments/*.yaml"]}))
    (root / "id_dummy").write_text("not a real key\n")
    (root / "id_dummy").chmod(0o600)
    data = root / "experiments" / "data"
    (data / "train.csv").write_text("a,b,target\n1,2,0\n2,1,1\n3,3,0\n4,0,1\n")
    (data / "valid.csv").write_text("a,b,target\n1,1,0\n2,2,1\n")
    for i in range(CLUSTERS):
        ip = f"10.0.{i}"
        (root / "clusters" / f"c{i:03d}.yaml").write_text(yaml.safe_dump({
            "cluster_name": f"c{i:03d}",
            "provider": {"type": "local", "head_ip": f"{ip}.1",
                         "worker_ips": [f"{ip}.2", f"{ip}.3"]},
            "auth": {"ssh_user": "ray", "ssh_private_key": "../id_dummy"},
            "min_workers": 2, "max_workers": 2}, sort_keys=False))
    for i in range(EXPERIMENTS):  # the shape of experiments/quickstart.yaml
        (root / "experiments" / f"e{i:03d}.yaml").write_text(yaml.safe_dump({
            "name": f"e{i:03d}", "cluster": f"../clusters/c{i % CLUSTERS:03d}.yaml",
            "trainer": "torch",
            "model": {"name": "mlp", "hidden_dims": [32, 16], "num_classes": 2},
            "datasets": {"train": {"format": "csv", "path": "data/train.csv"},
                         "valid": {"format": "csv", "path": "data/valid.csv"}},
            "label_column": "target",
            "preprocessors": [{"type": "StandardScaler"}],
            "train_loop_config": {"lr": 0.01, "epochs": 5 + i % 3, "batch_size_per_worker": 32,
                                  "weight_decay": 0.0001},
            "scaling_config": {"num_workers": 2, "use_gpu": False},
            "run_config": {"checkpoint_config": {"num_to_keep": 1,
                                                 "checkpoint_score_attribute": "accuracy",
                                                 "checkpoint_score_order": "max"}}},
            sort_keys=False))


def write_applied_state(root: Path) -> int:
    """The state an apply of every file would leave (clusters up, jobs succeeded), written
    through the library into $ORCHESTRATE_HOME/projects/NAME; returns its entry count."""
    from orchestrator.gitops.desired import read_desired
    from orchestrator.gitops.store import ProjectState
    from orchestrator.language.project import load_project
    from orchestrator.state import cluster_key
    from orchestrator.state.document import StateDoc

    project = load_project(root / "orchestrate.yaml")
    ps = ProjectState.open(project)
    desired = read_desired(project, project.files(),
                           lambda name: ps.machine.secrets.path(cluster_key(name)))
    doc = StateDoc(project.name)
    for item in desired:
        if item.kind == "cluster":
            assert item.rendered is not None
            doc.resources[item.address] = {
                "kind": "cluster", "name": item.name, "file": item.file, "provider": "local",
                "hash": item.hash, "config": item.config,
                "record": {"state": "up", "head_ip": item.rendered.config["provider"]["head_ip"],
                           "dashboard_port": 8265, "dashboard_host": "0.0.0.0"}}
        else:
            doc.resources[item.address] = {
                "kind": "experiment", "name": item.name, "file": item.file, "hash": item.hash,
                "cluster": item.cluster, "job_id": f"job-{item.name}", "status": "SUCCEEDED"}
    ps.write(doc)
    return len(doc.resources)


def plan_vs_validate(rounds: int, work: Path) -> None:
    root, home = work / "project", work / "home"
    os.environ["ORCHESTRATE_HOME"] = str(home)  # before the library opens any state
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    write_project(root)
    entries = write_applied_state(root)
    plan = [*ORCHESTRATE, "plan", "--refresh=false", "--detailed-exitcode"]
    validate = [*ORCHESTRATE, "validate", "clusters", "experiments"]

    # Untimed first: the plan must have no changes, or this would measure the wrong thing.
    done = subprocess.run(plan, env=env, cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"`{' '.join(plan)}` exited {done.returncode}, not 0 (no changes): stopping\n"
                 f"{done.stdout[-5000:]}\n{done.stderr[-3000:]}")
    print(f"project: {CLUSTERS} clusters, {EXPERIMENTS} experiments, {entries} state entries "
          f"in {root}; plan says: {done.stdout.strip().splitlines()[-1]}", flush=True)
    timed(validate, env, root)

    results = alternate(rounds, {"plan": lambda: timed(plan, env, root),
                                 "validate": lambda: timed(validate, env, root)})
    report(f"no-change plan vs validate of {CLUSTERS + EXPERIMENTS} files ({rounds} rounds, s)",
           results)
    ratio = statistics.median(results["plan"]) / statistics.median(results["validate"])
    print(f"ratio of medians: {ratio:.3f} (target <= 1.5)")
    print(f"reproduce: cd {root} && ORCHESTRATE_HOME={home} {' '.join(plan)}; "
          f"{' '.join(validate)}")


# --- 2. no-op apply of a project holding one live cluster ------------------------------------

def noop_apply(rounds: int, work: Path) -> None:
    import yaml

    from tests.cluster.hosts import Network, local_cluster

    work = work / "live"
    work.mkdir()
    home = work / "home"
    env = dict(os.environ, ORCHESTRATE_HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
    root = work / "project"
    (root / "clusters").mkdir(parents=True)
    (root / "orchestrate.yaml").write_text(yaml.safe_dump(
        {"project": "bench-apply", "include": ["clusters/*.yaml"]}))
    name = "bench-apply"
    file = root / "clusters" / f"{name}.yaml"
    network = Network.create(work / "hosts", 1)
    launched = False
    try:
        file.write_text(yaml.safe_dump(local_cluster(name, network)))
        start = time.monotonic()
        launched = True
        timed([*ORCHESTRATE, "apply", "-y"], env, root)
        print(f"\nlaunched {name} with `orchestrate apply -y` in {time.monotonic() - start:.1f} s "
              f"(untimed)", flush=True)
        apply = [*ORCHESTRATE, "apply", "-y"]
        up = [*ORCHESTRATE, "up", str(file), "-y"]
        for command in (apply, up):  # untimed: what each no-op says
            done = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True)
            print(f"`{' '.join(command[2:])}` exit {done.returncode}, says: "
                  + " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:]), flush=True)
        results = alternate(rounds, {
            "apply": lambda: timed(apply, env, root, expect="No changes"),
            "up FILE": lambda: timed(up, env, root)})
        timed([*ORCHESTRATE, "down", name, "-y"], env, root)  # the project's state follows
        launched = False
    finally:
        if launched:  # the timed part failed: take it down by name
            subprocess.run([*ORCHESTRATE, "down", name, "-y"], env=env, capture_output=True)
        network.close()
    report(f"no-op apply of a project of one live cluster vs no-op `up FILE` ({rounds} rounds, s)",
           results)
    median = statistics.median(results["apply"])
    ratio = median / statistics.median(results["up FILE"])
    print(f"apply median {median:.2f} s (target <= 1.5 s); ratio of medians apply / up: "
          f"{ratio:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-live", action="store_true",
                        help="skip part 2 (a live cluster on this host; needs root)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="orc-bench-plan-"))
    plan_vs_validate(args.rounds, work)
    if args.no_live:
        print("\nno-op apply: skipped (--no-live)")
    elif os.geteuid() != 0:
        print("\nno-op apply: skipped (needs root: creates a unix user for the node and runs "
              "sshd on port 22)")
    else:
        noop_apply(args.rounds, work)
    print(f"reproduce: {sys.executable} {ROOT / 'benchmarks' / 'plan_vs_validate.py'} "
          f"--rounds {args.rounds}" + (" --no-live" if args.no_live else ""))


if __name__ == "__main__":
    main()
