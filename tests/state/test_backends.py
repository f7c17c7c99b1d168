"""The state backends (a folder, S3) and the lock held around changes to a project's state.

S3 is moto's server on loopback (tests/moto_server.py): AWS's API is faked at the wire, the
backend's own code and boto3 run for real. Every behaviour that both backends promise is tested
on both.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.errors import StateConflict, StateError, StateLocked, Terminated
from orchestrator.state.backend_file import FileBackend
from orchestrator.state.backend_s3 import S3Backend
from orchestrator.state.backends import LockInfo, locked, open_backend

from ..moto_server import aws_env, client, make_bucket, moto_server  # noqa: F401 - fixtures
from ..processes import stop

REPO = Path(__file__).resolve().parents[2]
BUCKET, PREFIX = "orc-state", "team/ml"


@pytest.fixture
def aws(aws_env):  # noqa: F811 - the fixture imported above
    make_bucket(aws_env, BUCKET)
    return aws_env


@pytest.fixture(params=["file", "s3"])
def url(request, tmp_path):
    if request.param == "s3":
        request.getfixturevalue("aws")
        return f"s3://{BUCKET}/{PREFIX}"
    return (tmp_path / "state").as_uri()


@pytest.fixture
def backend(url, tmp_path):
    return open_backend(url, default_folder=tmp_path / "unused")


def raw_lock(backend) -> bytes | None:
    """The lock note as stored, read around the backend."""
    if isinstance(backend, FileBackend):
        path = backend.folder / "state.lock"
        return path.read_bytes() if path.exists() else None
    s3 = client_for_env("s3")
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/state.lock")
    if not listed.get("KeyCount"):
        return None
    return s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/state.lock")["Body"].read()


def put_raw_lock(backend, data: bytes) -> None:
    if isinstance(backend, FileBackend):
        backend.folder.mkdir(parents=True, exist_ok=True)
        (backend.folder / "state.lock").write_bytes(data)
    else:
        client_for_env("s3").put_object(Bucket=BUCKET, Key=f"{PREFIX}/state.lock", Body=data)


def client_for_env(service: str):
    import boto3

    return boto3.client(service)


# --- the document ----------------------------------------------------------------------------

def test_versions_guard_every_write(backend):
    assert backend.read() is None
    first = backend.write(b'{"serial": 1}', None)
    assert backend.read() == (b'{"serial": 1}', first)
    with pytest.raises(StateConflict):
        backend.write(b'{"serial": 1, "other": true}', None)  # someone created it first
    second = backend.write(b'{"serial": 2}', first)
    assert second != first
    with pytest.raises(StateConflict):
        backend.write(b'{"serial": 2, "stale": true}', first)  # read before the last write
    assert backend.read() == (b'{"serial": 2}', second)
    third = backend.write(b'{"serial": 3}', second)
    assert backend.read() == (b'{"serial": 3}', third)


def test_s3_keys_sit_under_the_prefix(aws):
    backend = open_backend(f"s3://{BUCKET}/{PREFIX}/", default_folder=Path("/unused"))
    assert isinstance(backend, S3Backend) and backend.url == f"s3://{BUCKET}/{PREFIX}"
    backend.write(b"{}", None)
    with locked(backend, "apply"):
        keys = [o["Key"] for o in client(aws, "s3").list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert sorted(keys) == [f"{PREFIX}/state.json", f"{PREFIX}/state.lock"]
    bare = open_backend(f"s3://{BUCKET}", default_folder=Path("/unused"))
    bare.write(b"{}", None)
    assert client(aws, "s3").get_object(Bucket=BUCKET, Key="state.json")["Body"].read() == b"{}"


# --- the lock --------------------------------------------------------------------------------

def test_second_acquire_is_refused_naming_the_first(backend):
    first, second = LockInfo.new("apply"), LockInfo.new("up")
    backend.acquire(first)
    with pytest.raises(StateLocked) as refused:
        backend.acquire(second)
    assert refused.value.holder == first
    message = refused.value.message
    assert first.who in message and "apply" in message and first.id in message
    assert f"force-unlock {first.id}" in refused.value.hint
    assert backend.holder() == first
    backend.release(second.id)  # not its lock: left alone
    assert backend.holder() == first
    backend.release(first.id)
    assert backend.holder() is None and raw_lock(backend) is None
    backend.release(first.id)  # already gone: nothing
    backend.acquire(second)
    assert backend.holder() == second


def test_force_release_needs_the_holders_id(backend):
    with pytest.raises(StateError, match="not locked"):
        backend.force_release("0" * 32)
    info = LockInfo.new("apply")
    backend.acquire(info)
    with pytest.raises(StateError) as wrong:
        backend.force_release("f" * 32)
    assert info.id in wrong.value.message
    assert backend.holder() == info
    assert backend.force_release(info.id) == info
    assert backend.holder() is None


def test_an_unreadable_lock_still_locks(backend):
    put_raw_lock(backend, b"{not json")
    assert backend.holder() is None
    with pytest.raises(StateLocked) as refused:
        backend.acquire(LockInfo.new("apply"))
    assert refused.value.holder is None and "unreadable" in refused.value.message
    assert "force-unlock unknown" in refused.value.hint
    with pytest.raises(StateError, match="unknown"):
        backend.force_release("f" * 32)
    assert backend.force_release("unknown").id == "unknown"
    assert raw_lock(backend) is None
    backend.acquire(LockInfo.new("apply"))


def attempts(backend, monkeypatch) -> list[float]:
    """When each of the backend's acquire() calls happened (monotonic time)."""
    calls: list[float] = []
    acquire = backend.acquire

    def counted(info):
        calls.append(time.monotonic())
        return acquire(info)

    monkeypatch.setattr(backend, "acquire", counted)
    return calls


def test_locked_fails_at_once_or_waits_for_the_holder(backend, monkeypatch):
    other = LockInfo.new("down")
    backend.acquire(other)
    tried = attempts(backend, monkeypatch)
    with pytest.raises(StateLocked) as refused, locked(backend, "apply"):
        pass
    assert len(tried) == 1   # at once: one try, no waiting
    assert "down by" in refused.value.message and "--lock-timeout" in refused.value.hint

    # the holder lets go only once the waiter has said it waits: a timer started before the
    # first try could fire before that try reads the lock on a loaded machine (seen in CI)
    told: list[str] = []
    releasers: list[threading.Thread] = []

    def waiting(message):
        told.append(message)
        releasers.append(threading.Thread(target=backend.release, args=(other.id,)))
        releasers[-1].start()

    with locked(backend, "apply", timeout=60, progress=waiting) as info:
        assert backend.holder() == info and info.operation == "apply"
    for releaser in releasers:
        releaser.join()
    assert len(told) == 1 and "waiting for the state lock held by down by" in told[0]
    assert backend.holder() is None


def test_locked_gives_up_after_its_timeout(backend, monkeypatch):
    other = LockInfo.new("down")
    backend.acquire(other)
    tried = attempts(backend, monkeypatch)
    started = time.monotonic()
    with pytest.raises(StateLocked, match=r"after waiting 1\.5 s") as refused, \
            locked(backend, "apply", timeout=1.5):
        pass
    waited = time.monotonic() - started
    # tried again, and gave up only once the timeout had passed (when each try starts is not
    # tested: on a loaded machine one S3 request may take most of a second; no upper bound either)
    assert len(tried) >= 2 and waited >= 1.5, (tried, waited)
    assert refused.value.holder == other and backend.holder() == other


def test_locked_releases_on_errors_and_ctrl_c(backend):
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RuntimeError), locked(backend, "apply"):
        assert backend.holder() is not None
        assert signal.getsignal(signal.SIGTERM) is not before
        raise RuntimeError("boom")
    assert backend.holder() is None
    with pytest.raises(KeyboardInterrupt), locked(backend, "apply"):
        raise KeyboardInterrupt
    assert backend.holder() is None
    assert signal.getsignal(signal.SIGTERM) is before


def test_locked_in_a_thread_leaves_signals_alone(backend):
    seen = []

    def hold():
        with locked(backend, "apply") as info:
            seen.append((backend.holder() == info, signal.getsignal(signal.SIGTERM)))

    before = signal.getsignal(signal.SIGTERM)
    worker = threading.Thread(target=hold)
    worker.start()
    worker.join(30)
    assert seen == [(True, before)] and backend.holder() is None


HOLD = """
import sys, time
from pathlib import Path
from orchestrator.errors import Terminated
from orchestrator.state.backends import locked, open_backend

backend = open_backend(sys.argv[1], default_folder=Path("/nonexistent"))
try:
    with locked(backend, "apply", timeout=float(sys.argv[2]),
                progress=lambda text: print(text, flush=True)):
        print("held", flush=True)
        time.sleep(120)
except Terminated:
    sys.exit(143)
sys.exit(5)
"""


def _hold(url: str, timeout: float = 0) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLD, url, str(timeout)], cwd=REPO,
                            env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_sigterm_releases_the_lock(backend, url):
    child = _hold(url)
    try:
        # Signalled once it says it holds the lock (not merely once the lock exists: a signal
        # between the two would leave nothing to show that it was held).
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held", child.communicate()
        holder = backend.holder()
        assert holder is not None and holder.pid == child.pid
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        stop(child)
    assert child.returncode == 143, err
    assert backend.holder() is None and raw_lock(backend) is None


def test_sigterm_while_waiting_takes_nothing(backend, url):
    mine = LockInfo.new("apply")
    backend.acquire(mine)
    child = _hold(url, timeout=60)
    try:
        assert child.stdout is not None
        assert "waiting for the state lock" in child.stdout.readline()
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=30)
    finally:
        stop(child)
    assert child.returncode == 143 and "held" not in out, err
    assert backend.holder() == mine


def test_sigterm_in_the_block_raises_terminated(backend):
    with pytest.raises(Terminated), locked(backend, "apply"):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
    assert backend.holder() is None


def test_one_of_many_concurrent_acquires_wins(tmp_path):
    backend = FileBackend(tmp_path / "state")
    infos = [LockInfo.new("apply") for _ in range(12)]
    won, barrier = [], threading.Barrier(len(infos))

    def race(info):
        barrier.wait()
        try:
            backend.acquire(info)
            won.append(info)
        except StateLocked:
            pass

    threads = [threading.Thread(target=race, args=(info,)) for info in infos]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(won) == 1 and backend.holder() == won[0]


# --- what is in the files --------------------------------------------------------------------

def test_file_backend_is_private(tmp_path):
    backend = open_backend((tmp_path / "state").as_uri(), default_folder=tmp_path / "unused")
    backend.write(b"{}", None)
    with locked(backend, "apply"):
        lock_mode = stat.S_IMODE((tmp_path / "state" / "state.lock").stat().st_mode)
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "state" / "state.json").stat().st_mode) == 0o600
    assert lock_mode == 0o600
    assert sorted(p.name for p in (tmp_path / "state").iterdir() if not p.name.startswith(
        "state.write-lock")) == ["state.json"]


def test_default_folder_when_no_url(tmp_path):
    backend = open_backend("", default_folder=tmp_path / "projects" / "p")
    assert isinstance(backend, FileBackend) and backend.folder == tmp_path / "projects" / "p"
    backend.write(b"{}", None)
    assert (tmp_path / "projects" / "p" / "state.json").read_bytes() == b"{}"


def test_the_lock_note_holds_no_secret(backend, monkeypatch):
    secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "org/repo")
    monkeypatch.setenv("GITHUB_RUN_ID", "42")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "x" * 36)
    with locked(backend, "apply") as info:
        body = raw_lock(backend)
    assert body is not None and json.loads(body) == info.as_dict()
    text = body.decode()
    assert secret not in text and "ghp_" not in text and "testing" not in text
    assert info.ci_url == "https://github.com/org/repo/actions/runs/42"
    assert info.describe().endswith(", CI: https://github.com/org/repo/actions/runs/42")


def test_lock_info_round_trips_and_rejects_damage(monkeypatch):
    for key in ("GITHUB_RUN_ID", "GITHUB_REPOSITORY", "CI_JOB_URL"):
        monkeypatch.delenv(key, raising=False)
    info = LockInfo.new("down")
    assert info.ci_url is None and len(info.id) == 32 and info.pid == os.getpid()
    assert info.who.endswith("@" + info.host)
    assert LockInfo.from_dict(json.loads(json.dumps(info.as_dict()))) == info
    described = info.describe()
    assert described.startswith(f"down by {info.who} (pid {info.pid}), since ")
    assert " UTC, lock id " + info.id in described and "CI" not in described
    for damaged in (None, [], "x", {**info.as_dict(), "pid": "12"}, {**info.as_dict(), "id": ""},
                    {k: v for k, v in info.as_dict().items() if k != "who"},
                    {**info.as_dict(), "created": True}):
        assert LockInfo.from_dict(damaged) is None
    monkeypatch.setenv("CI_JOB_URL", "https://gitlab.example/g/p/-/jobs/7")
    assert LockInfo.new("apply").ci_url == "https://gitlab.example/g/p/-/jobs/7"


# --- what goes wrong -------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["gs://bucket/x", "state/folder", "file://relative/x",
                                 "file:relative", "s3://", "https://example.com/state"])
def test_unknown_or_malformed_urls(bad, tmp_path):
    with pytest.raises(StateError) as error:
        open_backend(bad, default_folder=tmp_path)
    assert bad in error.value.message and error.value.hint


def test_unknown_scheme_lists_the_known_ones(tmp_path):
    with pytest.raises(StateError) as error:
        open_backend("gs://b/p", default_folder=tmp_path)
    assert "file://" in error.value.hint and "s3://" in error.value.hint


def test_a_missing_bucket_is_named(aws):
    backend = open_backend("s3://no-such-bucket/p", default_folder=Path("/unused"))
    for attempt in (backend.read, lambda: backend.write(b"{}", None),
                    lambda: backend.acquire(LockInfo.new("apply")), backend.holder):
        with pytest.raises(StateError) as error:
            attempt()
        assert "the state bucket 'no-such-bucket' does not exist" in error.value.message
        assert "aws s3 mb s3://no-such-bucket" in error.value.hint


def test_no_credentials_is_a_state_error(aws, monkeypatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    backend = open_backend(f"s3://{BUCKET}/{PREFIX}", default_folder=Path("/unused"))
    with pytest.raises(StateError) as error:
        backend.read()
    assert f"s3://{BUCKET}/{PREFIX}" in error.value.message
    assert "no AWS credentials" in error.value.message


def test_a_refusal_names_the_aws_code_and_nothing_else():
    """AWS's answer as botocore parses it off the wire (moto does not check permissions)."""
    from botocore.exceptions import ClientError

    from orchestrator.state.backend_s3 import aws_error

    refusal = ClientError({"Error": {"Code": "AccessDenied", "Message": "key AKIAEXAMPLE denied"},
                           "ResponseMetadata": {"HTTPStatusCode": 403}}, "PutObject")
    error = aws_error(refusal, doing="write", where="the state at s3://b/p")
    assert error.message == ("cannot write the state at s3://b/p: AWS refused PutObject with "
                             "AccessDenied (HTTP 403)")
    assert "permissions" in error.hint and "AKIA" not in error.message


def test_an_unreachable_endpoint_is_a_state_error(aws, monkeypatch):
    import socket

    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    backend = open_backend(f"s3://{BUCKET}/{PREFIX}", default_folder=Path("/unused"))
    with pytest.raises(StateError) as error:
        backend.read()
    assert f"s3://{BUCKET}/{PREFIX}" in error.value.message
    assert "did not answer" in error.value.message
