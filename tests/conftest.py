"""Suite-wide isolation: no test reads or writes the user's real state (the home folder is a
temporary one, and the suite fails if anything under the real home changed), and nothing may
reach a cloud or its metadata service (169.254.169.254)."""
import os
import signal
import tempfile
import uuid
from pathlib import Path

import pytest

pytest_plugins = ["tests.tiers", "tests.scheduling"]

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
    # no warm embedded Ray outlives a test: its last run stops it (tests/test_embedded_idle.py
    # sets a limit of its own)
    "ORCHESTRATE_EMBEDDED_RAY_IDLE": "0",
}

# Set before anything imports an SDK, which may read these once at import time.
os.environ.update(ISOLATED_ENV)

# Every process this session starts inherits this variable, so the leak check counts what this
# session left and nothing of another running beside it (another tier, or pytest-xdist's other
# worker: each imports this file and draws its own).
os.environ["ORCHESTRATE_TEST_SESSION"] = uuid.uuid4().hex

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


class SharedRay:
    """The ray tier's one embedded Ray (started on first use, ~10 s; stopped at the end of the
    session), started as `orchestrate run` starts it: private temp dir, ports and token."""

    def __init__(self, folder: Path) -> None:
        from orchestrator.state.secrets import FileSecrets

        self.secrets = FileSecrets(folder / "secrets")
        self.ray = None

    def get(self):
        """The Ray, started again if it no longer answers (a test must not be the next one's
        failure)."""
        from orchestrator.reach import embedded
        from orchestrator.util.waiting import until

        ray = self.ray
        # a busy machine's dashboard is slow, not gone: a Ray still running gets a minute
        usable = ray is not None and until(
            lambda: not embedded.running(ray) or embedded._answers(ray.address, self.secrets),
            timeout=60, interval=1.0) and embedded.running(ray)
        if not usable:
            self.stop()
            # profiling on, as `profiling: true` in an experiment starts it (issue 33): the
            # test of `orchestrate profile` profiles a run on it
            self.ray = embedded.start(self.secrets, profiling=True)
        return self.ray

    @property
    def token(self) -> str:
        from orchestrator.reach import embedded

        return self.secrets.read(embedded.TOKEN_KEY)

    def adopt(self):
        """Make it the local Ray of the current ORCHESTRATE_HOME: its record (kept, so no
        `orchestrate run` there stops it when it ends) and its token."""
        from dataclasses import replace

        from orchestrator.reach import embedded
        from orchestrator.state import State

        ray = self.get()
        secrets = State.here().secrets
        secrets.put(embedded.TOKEN_KEY, self.token)
        embedded._write_record(replace(ray, keep=True), secrets)
        return ray

    def tidy(self) -> None:
        """After a test: the jobs it left running are stopped and Serve is shut down, so the
        next test finds the Ray idle, as if it were new."""
        from orchestrator.clients.jobs import TERMINAL, JobsClient
        from orchestrator.reach import embedded
        from orchestrator.util import http

        if self.ray is None:
            return
        endpoint = self.ray.endpoint(self.secrets)
        jobs = JobsClient(endpoint)
        running = [job.submission_id for job in jobs.list()
                   if str(getattr(job.status, "value", job.status)) not in TERMINAL]
        for job_id in running:
            jobs.stop(job_id)
        for job_id in running:
            jobs._wait(job_id)
        served = http.get_json(endpoint.address, "/api/serve/applications/", endpoint.token,
                               timeout=30)
        if served.get("controller_info") or served.get("applications"):
            http.send_json(endpoint.address, "/api/serve/applications/", endpoint.token, {},
                           method="DELETE", timeout=120)
        assert embedded._answers(self.ray.address, self.secrets)

    def stop(self) -> None:
        from orchestrator.reach import embedded

        if self.ray is not None:
            embedded.stop(self.ray)
            self.ray = None


@pytest.fixture(scope="session")
def shared_ray(tmp_path_factory):
    """One embedded Ray (per pytest-xdist worker) for every test that uses a Ray but does not
    test the local Ray's own life cycle (those, marked own_ray, start their own)."""
    shared = SharedRay(tmp_path_factory.mktemp("shared-ray"))
    try:
        yield shared
    finally:
        shared.stop()


@pytest.fixture
def local_ray(shared_ray):
    """The shared embedded Ray, as this test's local Ray: its record (kept: no `orchestrate
    run` of the test stops it when it ends) and its token under this test's ORCHESTRATE_HOME,
    so `run`, `jobs`, `logs`, `serve` and `predict` use it. Other tests' jobs ran on it before:
    a test looks at its own jobs, never at all of them. After the test, what it left running
    is stopped (`SharedRay.tidy`)."""
    ray = shared_ray.adopt()
    try:
        yield ray
    finally:
        shared_ray.tidy()


@pytest.fixture
def state():
    """This test's StateStore and SecretStore (under its own ORCHESTRATE_HOME)."""
    from orchestrator.state import State

    return State.here()



# What the suite may start: Ray's daemons, the embedded Ray's watchdog, sshds of the test hosts,
# moto's server, `ray up`.
STARTED_BY_TESTS = (r"raylet|gcs_server|dashboard/agent|orchestrator\.reach\.watchdog|"
                    r"sshd -D -e -f|moto\.server|\.venv-mlflow/|ray\.scripts\.scripts (up|down)")


@pytest.fixture(scope="session", autouse=True)
def _leaves_nothing_behind():
    """After the whole suite: no process it started is still running (a Ray, an sshd, moto, a
    `ray up`) and no network namespace or link of the test hosts it made is left."""
    import time

    from tests.cluster.hosts import leftovers
    from tests.processes import of_this_session

    yield
    deadline = time.monotonic() + 60   # Ray's processes take a few seconds to exit
    # A host's Ray processes, started over SSH, do not carry the session's tag; they die with
    # the host's sshd, which does.
    while (left := of_this_session(STARTED_BY_TESTS)) and time.monotonic() < deadline:
        time.sleep(1)
    names = leftovers()
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
