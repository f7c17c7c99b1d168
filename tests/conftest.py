"""Suite-wide isolation: no test reads or writes the user's real state, and nothing may reach
a cloud or its metadata service (169.254.169.254)."""
import os
import signal

import pytest

ISOLATED_ENV = {
    "AWS_EC2_METADATA_DISABLED": "true",
    # google-auth compares with the lowercase "true" only, once, when it is first imported.
    "NO_GCE_CHECK": "true",
    "RAY_USAGE_STATS_ENABLED": "0",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}

# Set before anything imports an SDK, which may read these once at import time.
os.environ.update(ISOLATED_ENV)

# Tests send Ctrl-C (SIGINT) to the commands they start. A runner started with SIGINT ignored
# (`nohup pytest &`) would hand that to every child, which would then never see it: a handler
# here is reset to the default action in each child, an ignored signal is not.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("orchestrate-home")
    monkeypatch.setenv("ORCHESTRATE_HOME", str(home))
    for key, value in ISOLATED_ENV.items():
        monkeypatch.setenv(key, value)
    yield


@pytest.fixture
def local_ray():
    """The embedded local Ray (own temp dir, ports, token, under this test's ORCHESTRATE_HOME),
    held for the whole test so `orchestrate run` reuses it and jobs can be inspected afterwards;
    stopped at the end even when the test fails."""
    from orchestrator import embedded
    from orchestrator.state import State

    secrets = State.here().secrets
    try:
        with embedded.session(secrets) as (ray, _started):
            yield ray
    finally:
        embedded.shutdown(secrets)  # also a Ray a detached job asked to keep


@pytest.fixture
def state():
    """This test's StateStore and SecretStore (under its own ORCHESTRATE_HOME)."""
    from orchestrator.state import State

    return State.here()

