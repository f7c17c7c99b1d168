"""Suite-wide isolation: no test reads or writes the user's real state (the home folder is a
temporary one, and the suite fails if anything under the real home changed), and nothing may
reach a cloud or its metadata service (169.254.169.254)."""
import os
import signal
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The real home folder, and one for the whole suite in its place (each test gets its own below):
# Ray's default results folder (~/ray_results), ~/.orchestrate, ~/.ray and every tool's cache
# land in a temporary folder. Set before anything reads it: Ray Train resolves ~/ray_results when
# it is imported.
REAL_HOME = Path(os.path.expanduser("~")).resolve()
SUITE_HOME = Path(tempfile.mkdtemp(prefix="orchestrate-suite-home-"))
os.environ["HOME"] = str(SUITE_HOME)
# pip reads its user configuration (on these machines: the local wheel folders) from the home
# folder: the tests that build a package with pip (test_pipelines) keep reading it, never writing.
if (REAL_HOME / ".config" / "pip" / "pip.conf").is_file():
    os.environ.setdefault("PIP_CONFIG_FILE", str(REAL_HOME / ".config" / "pip" / "pip.conf"))
# matplotlib's font cache, built once for the suite instead of once per test's home.
os.environ["MPLCONFIGDIR"] = str(SUITE_HOME / "matplotlib")

ISOLATED_ENV = {
    "AWS_EC2_METADATA_DISABLED": "true",
    # google-auth compares with the lowercase "true" only, once, when it is first imported.
    "NO_GCE_CHECK": "true",
    "RAY_USAGE_STATS_ENABLED": "0",
    "MLFLOW_DISABLE_TELEMETRY": "true",   # MLflow 3 would report usage from the tracking tests
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
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ORCHESTRATE_HOME", str(home / ".orchestrate"))
    for key, value in ISOLATED_ENV.items():
        monkeypatch.setenv(key, value)
    # The runner's own MLflow settings must not reach a test's runs (the tracking tests set them).
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME",
                "MLFLOW_TRACKING_PASSWORD", "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.delenv(key, raising=False)
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



# What the suite may start: Ray's daemons, sshds of the test hosts, moto's server, `ray up`.
STARTED_BY_TESTS = (r"raylet|gcs_server|dashboard/agent|sshd -D -e -f|moto\.server|\.venv-mlflow/|"
                    r"ray\.scripts\.scripts (up|down)")


def _running(pattern: str) -> set[int]:
    import subprocess

    done = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return {int(pid) for pid in done.stdout.split()} - {os.getpid()}


@pytest.fixture(scope="session", autouse=True)
def _leaves_nothing_behind():
    """After the whole suite: no process it started is still running (a Ray, an sshd, moto, a
    `ray up`) and no network namespace or link of the test hosts is left. What ran before the
    suite (a developer's own Ray) is not counted."""
    import time

    from tests.cluster.hosts import leftovers

    root = os.geteuid() == 0
    before, names_before = _running(STARTED_BY_TESTS), set(leftovers() if root else [])
    yield
    deadline = time.monotonic() + 60   # Ray's processes take a few seconds to exit
    while (left := _running(STARTED_BY_TESTS) - before) and time.monotonic() < deadline:
        time.sleep(1)
    names = sorted(set(leftovers() if root else []) - names_before)
    assert not left and not names, (
        f"the suite left processes {sorted(left)} and namespaces/links {names}")


@pytest.fixture(scope="session", autouse=True)
def _real_home_untouched():
    """Nothing under the real home folder is created, changed or removed by the suite (every
    test runs with a temporary HOME; this catches what would slip past it). One `find` at the
    end: entries modified or changed since the suite began (a removal changes its folder). The
    checkout is left out when it lies under the home (pytest and Hypothesis keep caches in it)."""
    import shutil
    import subprocess

    marker = SUITE_HOME / ".suite-started"
    marker.touch()
    yield
    found = subprocess.run(["find", str(REAL_HOME), "-path", str(REPO), "-prune", "-o", "(",
                            "-newer", str(marker), "-o", "-cnewer", str(marker), ")", "-print"],
                           capture_output=True, text=True)
    touched = sorted(found.stdout.split("\n")[:-1])
    shutil.rmtree(SUITE_HOME, ignore_errors=True)
    assert not touched, f"the suite touched the real home {REAL_HOME}: {touched[:20]}"
