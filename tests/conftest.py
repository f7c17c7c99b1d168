"""Suite-wide isolation: no test reads or writes the user's real state, and nothing may reach
a cloud or its metadata service (169.254.169.254)."""
import os

import pytest

ISOLATED_ENV = {
    "AWS_EC2_METADATA_DISABLED": "true",
    "NO_GCE_CHECK": "True",
    "RAY_USAGE_STATS_ENABLED": "0",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("orchestrate-home")
    monkeypatch.setenv("ORCHESTRATE_HOME", str(home))
    for key, value in ISOLATED_ENV.items():
        monkeypatch.setenv(key, value)
    yield
