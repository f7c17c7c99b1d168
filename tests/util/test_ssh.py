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
