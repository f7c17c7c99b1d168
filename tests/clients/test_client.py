"""The job client without a cluster: Ray's errors become JobError, the token travels as a
bearer header."""
from __future__ import annotations

import socket

import pytest

from orchestrator.clients.jobs import JobsClient
from orchestrator.errors import JobError
from orchestrator.reach.endpoint import Endpoint
from tests.fake_ray import FakeRay


class _JobApi(FakeRay):
    """The fake of Ray's Job API (tests/fake_ray.py, checked against a real Ray by
    tests/clients/test_fake_ray.py); entered, a JobsClient on it: Ray's own
    JobSubmissionClient talks to it over real HTTP."""

    def __enter__(self) -> JobsClient:  # type: ignore[override]
        return JobsClient(Endpoint(self.address, None, "local"))


def test_unreachable_address_is_a_job_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once closed
    with pytest.raises(JobError) as caught:
        JobsClient(Endpoint(f"http://127.0.0.1:{port}", None, "cluster x")).list()
    assert "cluster x" in caught.value.message


def test_token_is_sent_as_bearer_header(monkeypatch):
    seen = {}

    class FakeClient:
        def __init__(self, address, headers=None):
            seen.update(address=address, headers=headers)

    import ray.job_submission

    monkeypatch.setattr(ray.job_submission, "JobSubmissionClient", FakeClient)
    JobsClient(Endpoint("http://10.0.0.1:8265", "s3cret", "cluster y"))
    assert seen["headers"] == {"Authorization": "Bearer s3cret"}


@pytest.mark.parametrize("starting", ["no agent", "dropped"])
def test_submit_waits_for_a_job_agent_that_is_still_starting(starting):
    """A loopback HTTP server answers as Ray's dashboard does while its job agent starts (HTTP
    500 "No available agent to submit job, please try again later", or a connection closed
    without an answer) twice, then accepts."""
    def not_yet(handler, count):
        if count > 2:
            return False
        if starting == "dropped":
            handler.close_connection = True   # no answer at all
        else:
            handler.send(500, "No available agent to submit job, please try again later.",
                         "text/plain")
        return True

    api = _JobApi(before=not_yet)
    with api as client:
        assert client.submit(entrypoint="true", runtime_env={}, submission_id="s-1") is True
    assert [post["submission_id"] for post in api.posts] == ["s-1", "s-1", "s-1"]


def test_a_squatter_gets_no_token_and_the_command_says_so(tmp_path):
    """Another process holds the address (as after a picked-then-released port was taken):
    Ray's client used to send it the token with its first request (/api/version)."""
    from tests.squatters import squatter

    with squatter(tmp_path / "got") as other:
        with pytest.raises(JobError) as caught:
            JobsClient(Endpoint(other.address, "t0ken-for-nobody", "the embedded Ray")).list()
        assert other.received == b""
    message = caught.value.message
    assert "the embedded Ray" in message and "no token sent" in message
    assert "t0ken-for-nobody" not in message + str(caught.value.hint)


def test_proxy_variables_see_no_token_and_a_redirect_is_not_followed(monkeypatch):
    """requests (Ray's client) reads HTTP_PROXY/ALL_PROXY for 127.0.0.1 too: a real "proxy"
    listener must see nothing; a 302 to another real listener is an error, and that listener
    sees nothing."""
    from tests.squatters import serving, set_proxy

    with serving() as proxy, serving() as dashboard:
        set_proxy(monkeypatch, proxy.address)
        client = JobsClient(Endpoint(dashboard.address, "s3cret", "cluster p"))
        with pytest.raises(JobError):
            client.list()                # the fake answers JSON that is not a job list
        assert proxy.requests == []
        assert dashboard.authorizations() and \
            set(dashboard.authorizations()) == {"Bearer s3cret"}
    with serving() as elsewhere, serving(redirect_to=elsewhere.address) as dashboard:
        with pytest.raises(JobError):     # Ray reads the 302 as a bad answer
            JobsClient(Endpoint(dashboard.address, "s3cret", "cluster r"))
        assert elsewhere.requests == []


class _Stream:
    """Ray's client as `follow` uses it: a log stream that hands over `streamed` and then goes
    quiet for ever (as Ray's does for 2-4 s after a job ended), the whole log, a status."""

    def __init__(self, streamed: list[str], whole: str, ends: bool = False) -> None:
        self.streamed, self.whole, self.ends, self.read_whole = streamed, whole, ends, 0

    async def tail_job_logs(self, job_id):
        import asyncio

        for chunk in self.streamed:
            yield chunk
        if not self.ends:
            await asyncio.sleep(3600)

    def get_job_logs(self, job_id):
        self.read_whole += 1
        return self.whole


def _following(monkeypatch, stream: _Stream, ended_after: int) -> tuple[list[str], str]:
    client = JobsClient.__new__(JobsClient)
    client.endpoint = Endpoint("http://127.0.0.1:1", None, "the embedded Ray")
    client._client = stream
    client._ended_info, client._ended_logs, client._queued = {}, {}, set()
    asked = []
    monkeypatch.setattr(client, "_ended", lambda job_id: asked.append(job_id) or
                        len(asked) > ended_after)
    monkeypatch.setattr(client, "_wait", lambda job_id: "SUCCEEDED")
    monkeypatch.setattr("orchestrator.clients.jobs.END_POLL", 0.01)
    lines: list[str] = []
    return lines, client.follow("job-1", lines.append)


def test_follow_takes_the_rest_of_the_log_whole_once_the_job_has_ended(monkeypatch):
    """The job ended while Ray's stream was still behind (mid-line, even): what the stream had
    not handed over comes from the whole log, each line once, in order."""
    stream = _Stream(["first\nsec", "ond\nthi"], "first\nsecond\nthird line\nORCHESTRATE_RESULT {}\n")
    lines, status = _following(monkeypatch, stream, ended_after=2)
    assert status == "SUCCEEDED" and stream.read_whole == 1
    assert lines == ["first", "second", "third line", "ORCHESTRATE_RESULT {}"]


def test_follow_reads_nothing_twice_when_the_stream_ends_first(monkeypatch):
    stream = _Stream(["a\nb\n", "c"], "a\nb\nc", ends=True)
    lines, _ = _following(monkeypatch, stream, ended_after=10**6)
    assert lines == ["a", "b", "c"] and stream.read_whole == 0


def test_an_ended_jobs_info_and_log_are_asked_once(monkeypatch):
    """After `follow`, `results` asks the same job's info and log again: an ended job's do not
    change, so they come from what was read (a long log is not fetched twice)."""
    from types import SimpleNamespace

    asked = {"info": 0, "logs": 0}

    class Ray:
        status = "RUNNING"

        def get_job_info(self, job_id):
            asked["info"] += 1
            return SimpleNamespace(status=self.status, start_time=1)

        def get_job_logs(self, job_id):
            asked["logs"] += 1
            return "the log\n"

    ray = Ray()
    client = JobsClient.__new__(JobsClient)
    client.endpoint = Endpoint("http://127.0.0.1:1", None, "the embedded Ray")
    client._client = ray
    client._ended_info, client._ended_logs, client._queued = {}, {}, set()
    assert client.status("j") == "RUNNING" and client.logs("j") == "the log\n"
    assert client.status("j") == "RUNNING" and client.logs("j") == "the log\n"
    assert asked == {"info": 2, "logs": 2}   # a running job: asked each time
    ray.status = "SUCCEEDED"
    for _ in range(3):
        assert client.status("j") == "SUCCEEDED" and client.logs("j") == "the log\n"
    assert asked == {"info": 3, "logs": 3}


def test_a_submission_whose_answer_was_lost_is_found_as_ours_not_as_a_duplicate():
    """The first POST creates the job, then the connection drops before the answer: the retry
    (same submission id) hears "already exists", and the job's mark says it is this call's."""
    def drop_first(handler, count):
        if count == 1:
            handler.close_connection = True   # the job exists; its answer never comes
            return True
        return False

    api = _JobApi(after=drop_first)
    with api as client:
        assert client.submit(entrypoint="true", runtime_env={}, submission_id="s-1") is True
        # the same experiment submitted again later: it exists, and it is not this call's
        assert client.submit(entrypoint="true", runtime_env={}, submission_id="s-1") is False
    assert [post["submission_id"] for post in api.posts] == ["s-1"] * 3
    assert len(api.jobs) == 1


def test_a_working_dir_that_changes_while_it_ships_still_names_an_uploaded_package(
        tmp_path, monkeypatch):
    """Ray's client hashes the working_dir twice (for the job's runtime_env, then to upload
    it): a file another run writes there in between made the job name a package that was never
    uploaded (it failed to start: "Failed to download runtime_env file package"). The write is
    made right after Ray's first hash, as another process's would land."""
    from ray._private.runtime_env import packaging, working_dir

    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "train.py").write_text("print('hi')\n")
    real_hash = packaging.get_uri_for_directory
    hashed: list[str] = []

    def hash_then_another_run_writes(directory, *args, **kwargs):
        uri = real_hash(directory, *args, **kwargs)
        hashed.append(uri)
        if len(hashed) == 1:
            (folder / "other-run.log").write_text("a line another run wrote\n")
        return uri

    monkeypatch.setattr(packaging, "get_uri_for_directory", hash_then_another_run_writes)
    monkeypatch.setattr(working_dir, "get_uri_for_directory", hash_then_another_run_writes)
    api = _JobApi()
    with api as client:
        assert client.submit(entrypoint="true", runtime_env={"working_dir": str(folder)},
                             submission_id="s-2") is True
    named = api.jobs["s-2"]["runtime_env"]["working_dir"]
    assert named.startswith("gcs://_ray_pkg_")
    assert named.rsplit("/", 1)[1] in api.packages, (named, api.packages)
    assert len(set(hashed)) == 2   # the race happened


def test_a_run_quiet_for_long_is_reported_then_less_often(monkeypatch):
    """No log line for ORCHESTRATE_STALL_REPORT seconds: `on_quiet` hears how long, then again
    only after twice as long."""
    monkeypatch.setenv("ORCHESTRATE_STALL_REPORT", "1")
    stream = _Stream(["starting\n"], "starting\n")
    client = JobsClient.__new__(JobsClient)
    client.endpoint = Endpoint("http://127.0.0.1:1", None, "the embedded Ray")
    client._client = stream
    client._ended_info, client._ended_logs, client._queued = {}, {}, set()
    reported: list[float] = []
    monkeypatch.setattr(client, "_ended", lambda job_id: len(reported) >= 2)
    monkeypatch.setattr(client, "_wait", lambda job_id: "SUCCEEDED")
    monkeypatch.setattr("orchestrator.clients.jobs.END_POLL", 0.01)
    lines: list[str] = []
    assert client.follow("job-1", lines.append, reported.append) == "SUCCEEDED"
    assert lines == ["starting"]
    assert len(reported) == 2 and 1 <= reported[0] < reported[1] and reported[1] >= 2


def test_a_queued_job_is_streamed_only_once_it_leaves_the_queue(monkeypatch):
    """Many runs may wait in the queue at once: none opens Ray's log stream (a websocket Ray's
    dashboard serves by reading the file every second) before its job has left PENDING."""
    events: list[str] = []

    class Stream(_Stream):
        async def tail_job_logs(self, job_id):
            events.append("stream")
            async for chunk in super().tail_job_logs(job_id):
                yield chunk

    client = JobsClient.__new__(JobsClient)
    client.endpoint = Endpoint("http://127.0.0.1:1", None, "the embedded Ray")
    client._client = Stream(["a\n"], "a\n")
    client._ended_info, client._ended_logs, client._queued = {}, {}, set()

    def ended(job_id: str) -> bool:
        asked = events.count("PENDING") + events.count("RUNNING")
        state = "PENDING" if asked < 3 else "RUNNING"
        events.append(state)
        (client._queued.add if state == "PENDING" else client._queued.discard)(job_id)
        return asked >= 6

    monkeypatch.setattr(client, "_ended", ended)
    monkeypatch.setattr(client, "_wait", lambda job_id: "SUCCEEDED")
    monkeypatch.setattr("orchestrator.clients.jobs.END_POLL", 0.01)
    monkeypatch.setattr("orchestrator.clients.jobs.QUEUED_POLL", 0.01)
    lines: list[str] = []
    assert client.follow("job-1", lines.append) == "SUCCEEDED"
    assert events[:4] == ["PENDING", "PENDING", "PENDING", "RUNNING"] and "stream" in events
    assert events.index("stream") > 3 and lines == ["a"]
