"""Ray's JobSubmissionClient on an Endpoint; Ray's exceptions become JobError here.

The token goes as `Authorization: Bearer <token>`: Ray's client sends the headers it is given on
every request and the log websocket, and adds its own only when the caller's environment has
token auth set up and no Authorization header was given (ray/dashboard/modules/dashboard_sdk.py).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import JobError, MissingDependency
from ..reach.endpoint import Endpoint
from ..util import listeners
from ..util.uris import is_uri
from ..util.waiting import poll

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
NO_AGENT = "No available agent to submit job"   # Ray's 500 while its job agent starts
# A dashboard just started may also take the connection and drop it without an answer (seen once
# in CI on the embedded Ray); a refused connection is not this, and is not tried again.
DROPPED = "Connection aborted"
AGENT_WAIT = 60.0
RETRY_PAUSE = 1.0
UPLOAD_TRIES = 3
ATTEMPT_KEY = "orchestrate_attempt"   # the job's metadata: which submit call started it
NOT_OURS = ("another program holds that port (or the forward closed): run the command again; "
            "if it keeps happening, see who listens there (`ss -ltnp`)")
END_POLL = 0.5        # seconds between asking a followed job's status
QUEUED_POLL = 2.0     # the same while it waits in the queue (many may wait)
PROBE_EVERY = 5.0     # seconds between checks that the head still answers while following
LOST_AFTER = 30.0     # seconds of silence from the head before following gives up
QUIET_AFTER = 120.0   # seconds without a log line before a followed run is reported stuck
T = TypeVar("T")


class JobsClient:
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._client = self._call(_make_client, endpoint.address, endpoint.headers or None)
        # what an ended job's info and log are: they change no more, so they are asked once
        self._ended_info: dict[str, Any] = {}
        self._ended_logs: dict[str, str] = {}
        # when the head last answered while a job was followed: silence is counted from then,
        # by every check at once (one that started late does not count it again)
        self._answered = time.monotonic()
        self._queued: set[str] = set()   # jobs last seen PENDING: asked about less often

    def _call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return function(*args, **kwargs)
        except JobError:
            raise
        except listeners.NotOurs as exc:
            raise JobError(f"{self.endpoint.label} ({self.endpoint.address}): {exc}; no token "
                           f"sent", hint=NOT_OURS) from None
        except ImportError as exc:
            raise MissingDependency("ray", "ray") from exc
        except Exception as exc:  # noqa: BLE001 - Ray raises RuntimeError, requests' errors, ...
            raise JobError(f"{self.endpoint.label} ({self.endpoint.address}): {_first_line(exc)}",
                           hint=_hint(exc)) from exc

    def submit(self, *, entrypoint: str, runtime_env: dict[str, Any], submission_id: str,
               metadata: dict[str, str] | None = None,
               entrypoint_resources: dict[str, float] | None = None) -> bool:
        """Submit; False (and nothing started) when a job with this id already exists.

        A refusal that says nothing about the job (`transient`: a Ray whose job agent has not
        registered yet, a connection dropped unanswered, a 5xx, a timeout; several submissions
        racing to upload the same working_dir) is tried again for up to AGENT_WAIT seconds
        with the same submission id: never a second job. When a retry finds the id taken, the
        job is ours if it carries this call's mark (its first attempt got through unanswered)."""
        import secrets

        mark = secrets.token_hex(8)
        metadata = {**(metadata or {}), ATTEMPT_KEY: mark}
        deadline = time.monotonic() + AGENT_WAIT
        retried = False
        runtime_env = self._call(self._uploaded, runtime_env)
        while True:
            try:
                self._client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env,
                                        submission_id=submission_id, metadata=dict(metadata),
                                        entrypoint_resources=entrypoint_resources or None)
            except Exception as exc:  # noqa: BLE001
                if "already exists" in str(exc):
                    return retried and self._marked(submission_id, mark)
                if transient(exc) and time.monotonic() < deadline:
                    retried = True
                    time.sleep(RETRY_PAUSE)
                    continue
                self._call(_raise, exc)
            return True

    def _uploaded(self, runtime_env: dict[str, Any]) -> dict[str, Any]:
        """The runtime_env with its working_dir uploaded, as the gcs:// URI of a package that
        exists. Ray's client hashes the folder, then hashes it again to upload it: when a file
        changes in between (another run's output written there), the job names a package that
        was never uploaded and fails to start. So: upload, then check that the package the job
        names is there (the check also pins it in Ray for its temporary-reference time), and
        upload again if not."""
        import copy

        if not runtime_env.get("working_dir") or is_uri(str(runtime_env["working_dir"])):
            return runtime_env
        for _ in range(UPLOAD_TRIES):
            uploaded = copy.deepcopy(runtime_env)
            self._client._upload_working_dir_if_needed(uploaded)
            uri = str(uploaded.get("working_dir") or "")
            if not uri.startswith("gcs://") or self._client._package_exists(uri):
                return uploaded
        raise JobError(f"the working_dir {runtime_env['working_dir']} kept changing while it was "
                       f"uploaded ({UPLOAD_TRIES} tries)",
                       hint="something writes into it as it ships: leave those files out "
                            "(runtime_env.excludes, .rayignore), or write them elsewhere")

    def _marked(self, job_id: str, mark: str) -> bool:
        """Whether the job `job_id` is the one a submission marked `mark` started."""
        try:
            found = self.info(job_id)
        except JobError:
            return False
        return (getattr(found, "metadata", None) or {}).get(ATTEMPT_KEY) == mark

    def cluster_status(self) -> dict[str, Any] | None:
        """Ray's `/api/cluster_status` (its resources: totals, use, what waits for them);
        None if the head does not say."""
        from ..util.http import HttpError, get_json

        try:
            found = get_json(self.endpoint.address, "/api/cluster_status", self.endpoint.token,
                             timeout=PROBE_EVERY * 2)
        except HttpError:
            return None
        return found if isinstance(found, dict) else None

    def nodes(self) -> list[dict[str, Any]] | None:
        """Ray's node table (`util.nodes.NODE_TABLE`), current the moment a node joins or
        dies, unlike the autoscaler's load report in `cluster_status`; None if the head does
        not say."""
        from ..util.http import HttpError, get_json
        from ..util.nodes import NODE_TABLE, listed

        try:
            return listed(get_json(self.endpoint.address, NODE_TABLE, self.endpoint.token,
                                   timeout=PROBE_EVERY * 2))
        except HttpError:
            return None

    def _on_job(self, function: Callable[[str], T], job_id: str) -> T:
        """`function(job_id)`; a job the Ray does not know (its 404, "Job X does not exist")
        is a JobError naming the job and where it was looked for."""
        try:
            return self._call(function, job_id)
        except JobError as exc:
            if "status code 404" in exc.message and "does not exist" in exc.message:
                raise JobError(f"no job {job_id!r} on {self.endpoint.label}",
                               hint="`orchestrate jobs` lists the jobs (--cluster NAME for a "
                                    "cluster's)") from None
            raise

    def info(self, job_id: str) -> Any:
        if job_id in self._ended_info:
            return self._ended_info[job_id]
        found = self._on_job(self._client.get_job_info, job_id)
        if str(getattr(found.status, "value", found.status)) in TERMINAL:
            self._ended_info[job_id] = found
        return found

    def status(self, job_id: str) -> str:
        status = self.info(job_id).status
        return str(getattr(status, "value", status))

    def logs(self, job_id: str) -> str:
        if job_id in self._ended_logs:
            return self._ended_logs[job_id]
        ended = job_id in self._ended_info   # known to have ended before the log was read
        text: str = self._on_job(self._client.get_job_logs, job_id)
        if ended:
            self._ended_logs[job_id] = text
        return text

    def stop(self, job_id: str) -> bool:
        stopped: bool = self._on_job(self._client.stop_job, job_id)
        return stopped

    def list(self) -> list[Any]:
        return self._call(self._client.list_jobs)

    def follow(self, job_id: str, on_line: Callable[[str], None],
               on_quiet: Callable[[float], None] | None = None) -> str:
        """Stream the job's log lines to `on_line` until it ends; returns its final status.

        A job waiting in Ray's queue (PENDING) has its status asked every QUEUED_POLL seconds
        and its log stream opened only once it leaves the queue (many may wait at once).

        Ray's log stream ends 2-4 s after the job (its tail reads the file once a second and
        looks at the job's status only at the end of the file): the status is asked every
        END_POLL seconds too, and once the job has ended the rest of its log is read whole
        (`logs`, the same file) and handed on from where the stream was.

        A head that stops answering (a dead machine sends no reset: the log stream just goes
        quiet) is noticed by a probe every PROBE_EVERY seconds; after LOST_AFTER seconds of
        silence this raises JobError instead of waiting forever.

        `on_quiet(seconds)`: called when no log line has come for QUIET_AFTER seconds, then
        again after twice as long each time (a run stuck without progress is reported)."""
        self._answered = time.monotonic()
        received = [0]   # characters of the log the stream has handed over
        pending = [""]   # of them, the start of a line not yet ended

        last = [time.monotonic()]   # when the last line came

        def take(text: str) -> None:
            last[0] = time.monotonic()
            received[0] += len(text)
            pending[0] += text
            *lines, pending[0] = pending[0].split("\n")
            for line in lines:
                on_line(line)

        started = asyncio.Event()   # the job has left the queue: its log can be streamed

        async def tail() -> None:
            await started.wait()
            async for chunk in self._client.tail_job_logs(job_id):
                take(chunk)

        async def watch() -> None:
            while True:
                await asyncio.sleep(PROBE_EVERY)
                await asyncio.to_thread(self._check_alive)

        async def quiet() -> None:
            wait = quiet_after()
            while True:
                await asyncio.sleep(1)
                silent = time.monotonic() - last[0]
                if silent >= wait and on_quiet is not None:
                    on_quiet(silent)   # in this loop's thread: never beside an on_line
                    wait *= 2

        async def ended() -> None:
            while True:
                done = await asyncio.to_thread(self._ended, job_id)
                if job_id not in self._queued:
                    started.set()
                if done:
                    return
                await asyncio.sleep(QUEUED_POLL if job_id in self._queued else END_POLL)

        async def both() -> bool:
            """True when the job's end was seen before the stream's."""
            tasks = [asyncio.ensure_future(tail()), asyncio.ensure_future(watch()),
                     asyncio.ensure_future(ended())]
            if on_quiet is not None and quiet_after() > 0:
                tasks.append(asyncio.ensure_future(quiet()))
            try:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
            for task in done:
                task.result()
            return tasks[2] in done and tasks[0] not in done

        ended_first = False
        try:
            ended_first = asyncio.run(both())
        except (KeyboardInterrupt, JobError):
            raise
        except Exception as exc:  # noqa: BLE001 - the stream broke; the job may still be fine
            self._check_alive()
            if self.status(job_id) not in TERMINAL:
                self._call(_raise, exc)
        status = self._wait(job_id)   # its end known first: the log read next is whole (kept)
        if ended_first:
            whole = self.logs(job_id)
            if len(whole) > received[0]:
                take(whole[received[0]:])
        if pending[0]:
            on_line(pending[0])
        return status

    def _ended(self, job_id: str) -> bool:
        """Whether the job has ended; False also when the head does not answer now (`watch`
        tells a lost head from a slow one)."""
        from urllib.parse import quote

        from ..util.http import HttpError, get_json

        try:
            info = get_json(self.endpoint.address, f"/api/jobs/{quote(job_id, safe='')}",
                            self.endpoint.token, timeout=PROBE_EVERY)
        except HttpError:
            return False
        self._answered = time.monotonic()
        status = info.get("status") if isinstance(info, dict) else None
        if status == "PENDING":
            self._queued.add(job_id)
        else:
            self._queued.discard(job_id)
        return status in TERMINAL

    def _check_alive(self) -> None:
        """Return once the head answers; JobError once it has not for LOST_AFTER seconds since
        it last did (asked at least once more here)."""
        from ..util.http import HttpError, get_json

        def answers() -> bool | None:
            try:
                get_json(self.endpoint.address, "/api/version", self.endpoint.token,
                         timeout=PROBE_EVERY)
            except HttpError as exc:
                if exc.status is None:
                    return None
            self._answered = time.monotonic()   # it answered (an error is an answer too)
            return True

        left = LOST_AFTER - (time.monotonic() - self._answered)
        if poll(answers, timeout=max(0.0, left), interval=1) is None:
            raise JobError(f"lost {self.endpoint.label}: its head at {self.endpoint.address} "
                           f"has not answered for {LOST_AFTER:.0f} s",
                           hint="the cluster is unreachable (see `orchestrate status`); the job "
                                "may still be running there if the head comes back")

    def _wait(self, job_id: str) -> str:
        def ended() -> str | None:
            self._check_alive()
            status = self.status(job_id)
            return status if status in TERMINAL else None

        status = poll(ended, timeout=float("inf"), interval=1)
        assert status is not None  # no deadline
        return status


def _make_client(address: str, headers: dict[str, str] | None) -> Any:
    import logging

    import ray.job_submission  # noqa: F401 - first: importing it sets its loggers to INFO

    for name in ("ray.dashboard.modules.dashboard_sdk", "ray._private.runtime_env.packaging",
                 "ray.dashboard.modules.job.sdk"):  # "Uploading package ...": noise for users
        logging.getLogger(name).setLevel(logging.WARNING)
    return submission_client(address, headers)


# What `requests` is given as `proxies` so that it reads none from the environment (a key set
# to None is kept by its merge with the environment's, then dropped: no proxy at all).
NO_PROXIES: dict[str, None] = {"http": None, "https": None, "all": None}


def submission_client(address: str, headers: dict[str, str] | None) -> Any:
    """Ray's JobSubmissionClient, with every request that carries a token sent directly (no
    HTTP(S)_PROXY / ALL_PROXY), never redirected (a 3xx is an error; requests would follow it),
    and only to a listener proven ours (`util.listeners`). Every HTTP request of Ray's client
    goes through `_do_request`; the log stream (`tail_job_logs`) is aiohttp's, which reads no
    proxy variables and drops Authorization on a redirect to another origin; it is checked
    too."""
    from ray.job_submission import JobSubmissionClient

    class Direct(JobSubmissionClient):
        def _guard(self) -> None:
            if any(key.lower() == "authorization" for key in (self._headers or {})):
                listeners.check(self._address)

        def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:
            self._guard()
            kwargs.setdefault("allow_redirects", False)
            kwargs.setdefault("proxies", dict(NO_PROXIES))
            return super()._do_request(method, endpoint, **kwargs)

        async def tail_job_logs(self, job_id: str) -> Any:
            self._guard()
            async for chunk in super().tail_job_logs(job_id):
                yield chunk

    return Direct(address, headers=headers)


def quiet_after() -> float:
    """QUIET_AFTER, or ORCHESTRATE_STALL_REPORT (seconds; 0: never report)."""
    import os

    try:
        return float(os.environ.get("ORCHESTRATE_STALL_REPORT", QUIET_AFTER))
    except ValueError:
        return QUIET_AFTER


def transient(exc: Exception) -> bool:
    """A refusal worth trying again with the same submission id: it says nothing about the job
    (its agent not registered yet, a dropped or timed-out connection, a server error). A
    refused connection is not one (no Ray there), nor a 4xx (the request itself is wrong)."""
    text = str(exc)
    if NO_AGENT in text or DROPPED in text:
        return True
    if any(f"status code {code}" in text for code in (500, 502, 503, 504)):
        return True
    return any(word in text for word in ("Read timed out", "RemoteDisconnected",
                                         "Connection reset", "ReadTimeout"))


def _raise(exc: Exception) -> None:
    raise exc


def _first_line(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def _hint(exc: Exception) -> str | None:
    text = str(exc)
    if "401" in text or "403" in text or "uthenticat" in text:
        return "the cluster refused the token; check `orchestrate status` for the cluster"
    if "onnect" in text:
        return "is the cluster up? `orchestrate status` shows it"
    return None
