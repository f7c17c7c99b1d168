"""The `ssh` put first on Ray's launcher's PATH (orchestrator/launch/ray_up/known_hosts.py): whatever
options Ray passes, ssh runs with the cluster's pinned host keys. Checked with ssh's own reading
of its arguments (`ssh -G`), and with real rsync, which finds `ssh` on the PATH for its `-e`."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from orchestrator.launch.ray_up import known_hosts
from orchestrator.state import State


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRATE_HOME", str(tmp_path / "home"))
    return State.here()


def ray_ssh_options(control_path: str) -> list[str]:
    """The options Ray 2.60's SSH command runner passes (its SSHOptions), as Ray builds them."""
    from ray.autoscaler._private.command_runner import SSHOptions

    return SSHOptions("/keys/k.pem", control_path, ProxyCommand=None).to_ssh_options_list(
        timeout=10)


def effective(argv: list[str]) -> dict[str, str]:
    shown = subprocess.run([argv[0], "-G", *argv[1:]], capture_output=True, text=True,
                           check=True).stdout
    return dict(line.split(" ", 1) for line in shown.splitlines() if " " in line)


def test_the_launchers_ssh_checks_the_pinned_keys_whatever_ray_passes(state):
    folder = known_hosts.ssh_folder(state, "c1")
    assert folder is not None
    wrapper = folder / "ssh"
    assert stat.S_IMODE(wrapper.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    options = effective([str(wrapper), *ray_ssh_options("/tmp/ray_ssh_x/y"), "root@10.0.0.1"])
    pinned = state.store.workspace("c1") / "known_hosts"
    assert options["stricthostkeychecking"] == "accept-new"
    assert options["userknownhostsfile"] == str(pinned)
    assert options["globalknownhostsfile"] == "/dev/null"
    assert options["hashknownhosts"] == "no"
    # Ray's ControlPath (a folder under /tmp anyone can make first) moves to a private one.
    control = known_hosts.control_folder()
    assert control is not None and options["controlpath"].startswith(f"{control}/")
    assert stat.S_IMODE(control.stat().st_mode) == 0o700 and control.stat().st_uid == os.getuid()
    assert options["controlmaster"] == "auto"   # Ray's: connections are still shared
    assert stat.S_IMODE(pinned.stat().st_mode) == 0o600
    # Each cluster its own file and its own shared connections (one opened for another
    # cluster of the same host checked that cluster's pins, and would not check these); the
    # launcher's environment puts the wrapper first.
    other = effective([str(known_hosts.ssh_folder(state, "c2") / "ssh"), "h"])
    assert other["userknownhostsfile"] == str(state.store.workspace("c2") / "known_hosts")
    mine, theirs = (Path(o["controlpath"]).parent for o in (options, other))
    assert mine != theirs and mine.parent == theirs.parent == control
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700 and mine.stat().st_uid == os.getuid()
    from orchestrator.launch.ray_up.backend import RayUp

    path = RayUp(state, lambda _: None).environment("c1", "local")["PATH"]
    assert path.split(os.pathsep)[0] == str(folder)


def test_a_socket_folder_not_ours_or_too_long_turns_connection_sharing_off(tmp_path,
                                                                          monkeypatch):
    script = known_hosts.wrapper_script("/usr/bin/ssh", tmp_path / "kh", Path("/x" * 30))
    assert "ControlMaster=no" in script and "ControlPath=none" in script
    script = known_hosts.wrapper_script("/usr/bin/ssh", tmp_path / "kh", Path("/tmp/c"))
    assert "ControlPath=/tmp/c/%C" in script
    short = Path(tempfile.mkdtemp(dir="/tmp"))   # pytest's tmp_path is too long for sockets
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(short))
        squatted = short / f"orchestrate-ssh-{os.getuid()}"   # another user made it first:
        squatted.mkdir(mode=0o777)
        squatted.chmod(0o777)
        assert known_hosts.control_folder() is None
        squatted.chmod(0o700)
        os.chown(squatted, os.getuid() + 1, -1)   # the test runs as root (sshd needs it too)
        assert known_hosts.control_folder() is None
        os.chown(squatted, os.getuid(), -1)
        assert known_hosts.control_folder() == squatted
        inner = known_hosts.control_folder(tmp_path / "kh")   # a cluster's, inside it
        assert inner is not None and inner.parent == squatted
        inner.chmod(0o755)   # a cluster's folder is held to the same rules
        assert known_hosts.control_folder(tmp_path / "kh") is None
    finally:
        shutil.rmtree(short)


def test_rsync_of_the_launcher_runs_the_wrapper_with_rays_options_after_ours(state, tmp_path):
    """Ray's rsync-up is `rsync --rsh "ssh <its options>" ...`; rsync execs `ssh` from PATH. A
    recorder stands in for the real ssh (no host here to copy to): it writes its arguments."""
    rsync = shutil.which("rsync")
    assert rsync, "rsync is one of the test's prerequisites (tests/prerequisites.py)"
    recorder = tmp_path / "record-ssh"
    recorder.write_text(f"#!{sys.executable}\nimport json, sys\n"
                        f"open({str(tmp_path / 'argv')!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    recorder.chmod(0o700)
    folder = state.store.workspace("c1") / "bin"
    folder.mkdir(mode=0o700)
    (folder / "ssh").write_text(known_hosts.wrapper_script(
        str(recorder), known_hosts.path(state, "c1"), None))
    (folder / "ssh").chmod(0o700)
    import json

    from ray.autoscaler._private.command_runner import SSHCommandRunner

    assert "--rsh" in Path(sys.modules[SSHCommandRunner.__module__].__file__).read_text()
    rsh = subprocess.list2cmdline(["ssh", *ray_ssh_options("/tmp/ray_ssh_x/y")])
    (tmp_path / "src").write_text("x")
    subprocess.run([rsync, "-avz", "--rsh", rsh, str(tmp_path / "src"), "root@10.0.0.1:/tmp/"],
                   env={**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"},
                   capture_output=True, timeout=30)
    argv = json.loads((tmp_path / "argv").read_text())
    first_strict = argv.index("StrictHostKeyChecking=accept-new")
    assert first_strict < argv.index("StrictHostKeyChecking=no")
    assert argv.index(f"UserKnownHostsFile={known_hosts.path(state, 'c1')}") < \
        argv.index("UserKnownHostsFile=/dev/null")
    assert "root@10.0.0.1" in argv or "10.0.0.1" in argv


def test_forget_drops_the_pinned_keys(state):
    file = known_hosts.path(state, "c1")
    file.write_text("10.0.0.1 ssh-ed25519 "
                    "AAAAC3NzaC1lZDI1NTE5AAAAIDtYZYNoAaQ+k+HoxZinFuVpi37si3FWQNaGGZdqQEKb\n")
    assert known_hosts.keys(state, "c1") == [
        ("10.0.0.1", "ED25519", "SHA256:wDPIbeEWMogH0FI26uCgA2LRx9ZqbbsNONdfaM3mKbM")]
    known_hosts.forget(state, "c1")
    assert not file.exists() and known_hosts.keys(state, "c1") == []
    assert "orchestrate known-hosts c1 --accept 10.0.0.1" in known_hosts.hint("c1", "10.0.0.1")


def test_the_launchers_output_names_a_changed_key_or_at_least_the_refusal(tmp_path):
    from orchestrator.launch.ray_up.backend import diagnose
    from orchestrator.util.ssh import host_key_changed
    from tests.util.test_ssh import CHANGED, PINNED_KEY, PINNED_PRINT

    file = tmp_path / "known_hosts"
    file.write_text(f"10.0.0.12 ssh-ed25519 {PINNED_KEY}\n10.0.0.11 ssh-ed25519 {PINNED_KEY}\n")
    output = "[1/7] Waiting for SSH to become available\n" + CHANGED.replace("FILE", str(file))
    changed = host_key_changed(output)
    assert changed is not None and changed.host == "10.0.0.11"
    assert PINNED_PRINT in str(changed) and "SHA256:/mSI0x9" in str(changed)
    said = diagnose("SSH still not available\nHost key verification failed.\n")
    assert "SSH refused a host's key" in said and "known-hosts" in said
