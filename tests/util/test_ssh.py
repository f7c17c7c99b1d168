"""The ssh command lines we run ourselves."""
from __future__ import annotations

import os

import pytest

from orchestrator.util.ssh import SshError, ssh_command


def test_ssh_refuses_users_and_hosts_that_would_be_options():
    assert ssh_command({"ssh_user": "u"}, "10.0.0.1")[-1] == "u@10.0.0.1"
    for auth, host in (({"ssh_user": "-oProxyCommand=id"}, "h"), ({"ssh_user": "u"}, "-oX=y")):
        with pytest.raises(SshError, match="may start with '-'"):
            ssh_command(auth, host)


def test_ssh_takes_the_key_and_proxy_of_the_auth_section():
    command = ssh_command({"ssh_user": "u", "ssh_private_key": "~/k",
                           "ssh_proxy_command": "nc %h %p"}, "h", connect_timeout=3)
    assert "ConnectTimeout=3" in command and "ProxyCommand=nc %h %p" in command
    assert command[command.index("-i") + 1] == os.path.expanduser("~/k")
    assert command[-1] == "u@h"


# What OpenSSH 9.2 printed, word for word, when a host offered another key than the one pinned
# (a real sshd of a test, its key changed); FILE stands for the known_hosts file.
CHANGED = """\
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
Someone could be eavesdropping on you right now (man-in-the-middle attack)!
It is also possible that a host key has just been changed.
The fingerprint for the RSA key sent by the remote host is
SHA256:/mSI0x9+oyqMIhb+/Y08QC5ncD6piAVX2Cqs9mE8J3Q.
Please contact your system administrator.
Add correct host key in FILE to get rid of this message.
Offending ED25519 key in FILE:2
  remove with:
  ssh-keygen -f "FILE" -R "10.0.0.11"
Host key for 10.0.0.11 has changed and you have requested strict checking.
Host key verification failed.
"""
PINNED_KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIDtYZYNoAaQ+k+HoxZinFuVpi37si3FWQNaGGZdqQEKb"
PINNED_PRINT = "SHA256:wDPIbeEWMogH0FI26uCgA2LRx9ZqbbsNONdfaM3mKbM"   # ssh-keygen -l's


def test_a_changed_host_key_is_named_with_the_host_and_both_fingerprints(tmp_path):
    from orchestrator.util.ssh import host_key_changed

    file = tmp_path / "known_hosts"
    file.write_text(f"10.0.0.12 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOther\n"
                    f"10.0.0.11 ssh-ed25519 {PINNED_KEY}\n")
    changed = host_key_changed("Warning: something first\n" + CHANGED.replace("FILE", str(file)))
    assert changed is not None and changed.host == "10.0.0.11"
    assert changed.known == f"ED25519 {PINNED_PRINT}"
    assert changed.offered == "RSA SHA256:/mSI0x9+oyqMIhb+/Y08QC5ncD6piAVX2Cqs9mE8J3Q"
    message = str(changed)
    assert "10.0.0.11" in message and PINNED_PRINT in message and changed.offered in message
    assert host_key_changed("Permission denied (publickey).\n") is None


def test_fingerprints_and_host_fields_read_as_ssh_keygen_does(tmp_path):
    import base64
    import hashlib
    import hmac

    from orchestrator.util.ssh import fingerprint, key_name, known_keys, names_host

    assert fingerprint(PINNED_KEY) == PINNED_PRINT and fingerprint("not base64!") == ""
    assert key_name("ssh-ed25519") == "ED25519" and key_name("ecdsa-sha2-nistp256") == "ECDSA"
    assert key_name("ssh-rsa") == "RSA"
    salt = b"0123456789abcdefghij"
    hashed = "|1|{}|{}".format(base64.b64encode(salt).decode(), base64.b64encode(
        hmac.new(salt, b"10.0.0.5", hashlib.sha1).digest()).decode())
    assert names_host(hashed, "10.0.0.5") and not names_host(hashed, "10.0.0.6")
    assert names_host("a,[10.0.0.5]:2222", "10.0.0.5") and not names_host("10.0.0.50", "10.0.0.5")
    file = tmp_path / "known_hosts"
    file.write_text(f"# comment\n10.0.0.5 ssh-ed25519 {PINNED_KEY}\n10.0.0.6 ssh-rsa AAAA\n")
    assert known_keys(file, "10.0.0.5") == [("10.0.0.5", "ssh-ed25519", PINNED_PRINT)]
    assert len(known_keys(file)) == 2 and known_keys(tmp_path / "none") == []


def test_pinned_ssh_checks_the_clusters_file_and_nothing_else(tmp_path):
    """`ssh -G` prints the options ssh would use: with the cluster's file, a new host is pinned
    there, a changed key refused, and no other file (the user's, the system's) counts."""
    import subprocess

    from orchestrator.util.ssh import KNOWN_HOSTS

    file = tmp_path / "my cluster" / "known_hosts"
    for command in (ssh_command({"ssh_user": "u", KNOWN_HOSTS: str(file)}, "h"),
                    ssh_command({"ssh_user": "u"}, "h", known_hosts=file)):
        shown = subprocess.run([command[0], "-G", *command[1:]], capture_output=True, text=True,
                               check=True).stdout.splitlines()
        assert "stricthostkeychecking accept-new" in shown
        assert f"userknownhostsfile {file}" in shown
        assert "globalknownhostsfile /dev/null" in shown and "hashknownhosts no" in shown
    unpinned = ssh_command({"ssh_user": "u"}, "h")
    assert "StrictHostKeyChecking=no" in unpinned and "UserKnownHostsFile=/dev/null" in unpinned
