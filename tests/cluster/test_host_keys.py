"""Host keys pinned on first use, over real SSH to a simulated host whose sshd then offers
another key (as a reinstalled machine would, or another machine answering at its address):
`exec`, `up` and `down` refuse it naming the host and both fingerprints; `known-hosts --accept`
pins the new key on purpose (only the fingerprint asked for); `down` forgets the keys."""
from __future__ import annotations

import json
import subprocess

import pytest

from orchestrator.launch.ray_up import known_hosts

from .conftest import launch, tear_down

pytestmark = [pytest.mark.ssh]


def refused(done, host: str, known: str, offered: str) -> None:
    assert done.returncode == 1, done.stderr
    said = " ".join(done.stderr.split())
    assert f"the host key of {host} has changed" in said, said
    assert known in said and offered in said, said
    assert "known-hosts" in said and "Traceback" not in said


def test_a_changed_host_key_stops_exec_up_and_down_until_accepted(make_machine, tmp_path):
    machine = make_machine(count=1)   # a head alone: every connection here goes to it
    head = machine.hosts[0]
    handle = launch(machine, tmp_path / "home", f"keys-{machine.name}")
    name = handle.name
    try:
        known = head.fingerprint()
        head.change_host_key()
        offered = head.fingerprint()
        assert offered != known
        refused(handle.cli("exec", name, "--", "true"), head.ip, known, offered)
        pinned = json.loads(handle.cli("known-hosts", name, "--format", "json").stdout)
        assert [key["fingerprint"] for key in pinned if key["host"] == head.ip] == [known]

        # Accepting on purpose: a fingerprint other than the offered one pins nothing.
        done = handle.cli("known-hosts", name, "--accept", head.ip, "--fingerprint", known)
        assert done.returncode == 1 and "nothing was pinned" in done.stderr
        done = handle.cli("known-hosts", name, "--accept", head.ip, "--fingerprint", offered)
        assert done.returncode == 0, done.stderr
        assert offered in done.stdout and known in done.stdout   # pinned, and what it was
        done = handle.cli("exec", name, "--", "echo", "on the head")
        assert done.returncode == 0 and "on the head" in done.stdout, done.stderr

        # Ray's launcher refuses it too (its ssh is orchestrate's, with the pinned keys): an
        # `up` that changes something in place (`ray up --no-restart`), then `down`.
        head.change_host_key()
        known, offered = offered, head.fingerprint()
        machine.cluster_file(name, idle_timeout_minutes=7)   # the same file, one field changed
        # A connection Ray's ssh opened to the host before its key changed is shared for 10 s
        # after its last use (ControlPersist): still the host it checked, so still used. Closed
        # here, so that this `up` meets the host anew, as it would later.
        control = known_hosts.control_folder()   # each cluster's connections in a folder in it
        assert control is not None
        for folder in control.iterdir():
            subprocess.run(["ssh", "-o", f"ControlPath={folder}/%C", "-O", "exit",
                            f"root@{head.ip}"], capture_output=True, timeout=30)
        done = handle.cli("up", str(handle.file), "-y")
        refused(done, head.ip, known, offered)
        assert "`ray up` stopped" in done.stderr
        refused(handle.cli("down", name, "-y"), head.ip, known, offered)

        assert handle.cli("known-hosts", name, "--accept", head.ip).returncode == 0
        done = handle.cli("down", name, "-y")
        assert done.returncode == 0, done.stderr
        assert not (handle.home / "clusters" / name / "known_hosts").exists()   # forgotten
    finally:
        tear_down(handle)
