"""What the SSH tests need from the machine, checked in one place: by their fixtures (which fail,
never skip, when something is missing) and by scripts/test.sh before the suite starts.

    python -m tests.prerequisites    # exit 1 naming what is missing, 0 when all is there

The tests that need these are marked `ssh`; leaving them out is a choice made on the command
line (`bash scripts/test.sh fast ray`), not something the suite decides on its own.
"""
from __future__ import annotations

import os
import shutil
import sys

INSTALL = "run them as root, where `bash scripts/setup-dev.sh` installs those packages"
LEAVE_OUT = "to run the other tiers without them: bash scripts/test.sh fast ray"


def missing() -> list[str]:
    """What is missing for the SSH tests (network, PID and mount namespaces; sshd in them)."""
    gaps = []
    if os.geteuid() != 0:
        gaps.append("root (the simulated hosts are network and PID namespaces)")
    for tool, package in (("sshd", "openssh-server"), ("ssh", "openssh-client"),
                          ("ssh-keygen", "openssh-client"), ("rsync", "rsync"),
                          ("ip", "iproute2"), ("unshare", "util-linux"),
                          ("nsenter", "util-linux"), ("pgrep", "procps")):
        if not (shutil.which(tool) or os.path.exists(f"/usr/sbin/{tool}")):
            gaps.append(f"{tool} (Debian package {package})")
    if not os.path.exists("/usr/bin/python3"):
        gaps.append("/usr/bin/python3 (Debian package python3: a test host's Python without Ray)")
    return gaps


def message(gaps: list[str]) -> str:
    return (f"the SSH cluster tests need {'; '.join(gaps)}. {INSTALL}; {LEAVE_OUT}")


def require() -> None:
    """In a fixture: fail the test, naming what is missing."""
    import pytest

    gaps = missing()
    if gaps:
        pytest.fail(message(gaps), pytrace=False)


if __name__ == "__main__":
    gaps = missing()
    if gaps:
        print(f"error: {message(gaps)}", file=sys.stderr)
        sys.exit(1)
