"""State is data, the repository is configuration: whoever can write a project's state document
(a bucket, a shared folder) must not choose what runs on the machines that plan or apply it.

A hostile entry here is one a state writer could make: its config's `auth.ssh_proxy_command`
writes a marker file (ssh runs a ProxyCommand before it even connects), its record says the
dashboard is tunneled (so reaching it means ssh). `orchestrate plan` and `apply` run for real as
subprocesses on the file backend; the head is 127.0.0.1, where nothing answers as a Ray head, so
reaching it fails at once (no Ray, no SSH host: a cluster that answers is the ssh tier's).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import StateError
from orchestrator.gitops.checkout import Checkout, checkout, plain_host
from orchestrator.gitops.desired import from_file
from orchestrator.gitops.store import ProjectState
from orchestrator.language.project import load_project
from orchestrator.state import State, cluster_key

from .test_commands import cli
from .test_planner import Project, applied, cluster, experiment


@pytest.fixture
def project(tmp_path, monkeypatch) -> Project:
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    project = Project(tmp_path / "repo")
    project.write("clusters", "gpu", cluster("gpu", project.key, provider={
        "type": "local", "head_ip": "127.0.0.1", "worker_ips": []}, min_workers=0,
        max_workers=0))
    project.write("experiments", "mnist", experiment("mnist", "../clusters/gpu.yaml"))
    return project


def hostile(project: Project, marker: Path, **record) -> ProjectState:
    """The state as an apply of the project left it, then rewritten by a state writer: the
    cluster's config now carries a proxy command that writes `marker`."""
    ps = ProjectState.open(load_project(project.root / "orchestrate.yaml"), State.here())
    ps.read()
    doc = applied(project)
    entry = doc.resources["cluster/gpu"]
    entry["config"]["auth"]["ssh_proxy_command"] = f"touch {marker}"
    entry["config"]["setup_commands"] = [f"touch {marker}"]
    entry["record"].update({"head_ip": "127.0.0.1", "dashboard_host": "127.0.0.1"}, **record)
    ps.write(doc)
    State.here().secrets.ensure(cluster_key("gpu"))   # this machine holds the cluster's token
    return ps


def test_plan_runs_no_proxy_command_from_the_state(project, tmp_path):
    marker = tmp_path / "ran-from-state"
    hostile(project, marker)
    done = cli(project, "plan")
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), "plan ran the state's proxy command"
    # The change is planned from the state's config as data: its setup commands differ.
    assert "cluster/gpu: restart" in done.stdout and "~ setup_commands" in done.stdout
    assert "~ auth.ssh_proxy_command" not in done.stdout   # the file has none: "-" removed
    assert "- auth.ssh_proxy_command" in done.stdout


def test_apply_runs_no_proxy_command_from_the_state(project, tmp_path):
    marker = tmp_path / "ran-from-state"
    hostile(project, marker)
    done = cli(project, "apply", "-y", "--allow-destructive")
    # The repository's file is launched from here: its key is no key, so `up` fails (preflight
    # over SSH), but nothing of the state's ran on the way.
    assert done.returncode == 1
    assert "cluster/gpu: restart" in done.stderr and "preflight failed for gpu" in done.stderr
    assert "could not open an SSH port forward to the head 127.0.0.1" in done.stderr  # `up` asked
    assert not marker.exists(), "apply ran the state's proxy command"


def test_what_a_checkout_writes_for_ray_and_ssh_comes_from_the_file(project, tmp_path):
    marker = tmp_path / "ran-from-state"
    ps = hostile(project, marker)
    doc = ps.read()
    entry = doc.resources["cluster/gpu"]
    entry["launcher"] = {"ray/cluster-gpu.state": json.dumps({
        "127.0.0.1": {"tags": {"ray-node-type": "head"}, "state": "running",
                      "external_ip": "attacker.example"},
        "10.9.9.9": {"tags": {"ray-node-type": "worker"}, "state": "running"}}),
        "../../../escape.state": "{}"}
    wanted = from_file("gpu", entry["file"], ps.project, ps.machine.secrets.path("clusters/gpu"))
    done = checkout(entry, ps, ps.machine, wanted)
    assert isinstance(done, Checkout)
    config = ps.machine.store.read_rendered("gpu")
    assert "ssh_proxy_command" not in config["auth"]
    assert config["setup_commands"] == ["echo setup"]          # the file's
    assert f"touch {marker}" in done.recorded["setup_commands"]  # the state's, kept as data
    launcher = ps.machine.store.workspace("gpu") / "launcher"
    nodes = json.loads((launcher / "ray" / "cluster-gpu.state").read_text())
    assert nodes == {"127.0.0.1": {"tags": {"ray-node-type": "head"}, "state": "running"}}
    assert not (tmp_path / "escape.state").exists()
    assert sorted(p.name for p in launcher.rglob("*") if p.is_file()) == ["cluster-gpu.state"]


@pytest.mark.parametrize("host", ["-oProxyCommand=touch /tmp/x", "host -p 22", "a;b",
                                  "user@host", "host:22", "", None, 42, "http://x"])
def test_a_head_address_from_the_state_is_a_plain_one(host):
    with pytest.raises(StateError) as error:
        plain_host(host, "cluster/gpu")
    assert "is not an IP address or host name" in error.value.message


@pytest.mark.parametrize("host", ["10.0.0.1", "::1", "head-1.example.com", "ip-10-0-0-1"])
def test_plain_addresses_pass(host):
    assert plain_host(host, "cluster/gpu") == host


def test_a_head_address_the_file_does_not_name_is_not_contacted(project, tmp_path):
    """On-prem, the file names the head: a state that says another (here an ssh option) is
    shown, not contacted."""
    marker = tmp_path / "ran-from-state"
    hostile(project, marker, head_ip=f"-oProxyCommand=touch {marker}")
    done = cli(project, "plan", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    drift = {d["address"]: d["message"] for d in json.loads(done.stdout)["drift"]}
    assert drift["cluster/gpu"] == (f"not checked: the state says its head is '-oProxyCommand="
                                    f"touch {marker}', its file names '127.0.0.1'")


def test_an_entry_whose_file_is_gone_shows_what_it_would_run(project, tmp_path):
    marker = tmp_path / "ran-from-state"
    hostile(project, marker)
    (project.root / "clusters" / "gpu.yaml").unlink()
    project.write("experiments", "mnist", experiment("mnist", None))
    text = cli(project, "plan")
    assert text.returncode == 0, text.stderr
    assert "- cluster/gpu: delete" in text.stdout
    assert f"through the proxy command 'touch {marker}'" in text.stdout
    assert "its file is gone: it would run what the state says" in text.stdout
    plan = json.loads(cli(project, "plan", "--format", "json").stdout)
    change = {c["address"]: c for c in plan["changes"]}["cluster/gpu"]
    assert change["destructive"] and any("proxy command" in line for line in change["runs"])
    drift = {d["address"]: d["message"] for d in plan["drift"]}
    assert "not checked" in drift["cluster/gpu"] and "is not planned" in drift["cluster/gpu"]
    markdown = cli(project, "plan", "--format", "markdown").stdout
    assert "its file is gone" in markdown and "```" not in markdown

    refused = cli(project, "apply", "-y")
    assert refused.returncode == 1 and "--allow-destructive" in refused.stderr
    assert "cluster/gpu (delete" in refused.stderr
    assert not marker.exists()


def test_the_project_file_is_named_in_the_plan(project):
    text = cli(project, "plan", "--refresh=false")
    assert f"project p from {project.root / 'orchestrate.yaml'} (state serial 0, not " \
           f"refreshed)" in text.stdout
    plan = json.loads(cli(project, "plan", "--refresh=false", "--format", "json").stdout)
    assert plan["project_file"] == str(project.root / "orchestrate.yaml")
    listed = json.loads(cli(project, "state", "list", "--format", "json").stdout)
    assert listed["project_file"] == str(project.root / "orchestrate.yaml")


def test_down_of_an_entry_whose_file_is_gone_needs_from_state(project, tmp_path):
    """`apply`'s delete passes --allow-destructive as `from_state`; without it (and `down` of a
    project's file never passes it) nothing of the state's is written or run."""
    from orchestrator.gitops.actions import cluster_down

    marker = tmp_path / "ran-from-state"
    ps = hostile(project, marker)
    (project.root / "clusters" / "gpu.yaml").unlink()
    doc = ps.read()
    with pytest.raises(StateError) as error:
        cluster_down("gpu", ps, doc, lambda _: None)
    assert "runs nothing on the state's word alone" in error.value.message
    assert "--allow-destructive" in error.value.hint
    assert ps.machine.store.read_cluster("gpu") is None and not marker.exists()
    assert ps.read().resources.keys() == doc.resources.keys()


def test_state_list_shows_terminal_escapes_from_the_state_as_text(project, tmp_path):
    """A state writer's head_ip holding a terminal escape (clear the screen, retitle the
    window) reaches the table as visible text, not as an escape."""
    hostile(project, tmp_path / "unused", head_ip="\x1b]0;owned\x07\x1b[2J10.0.0.1")
    done = cli(project, "state", "list")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "\\x1b[2J10.0.0.1" in done.stdout
