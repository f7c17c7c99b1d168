"""`orchestrate profile JOB` against a fake dashboard on loopback: what the user is told when
Ray refuses (profiling off: which setting turns it on), when the job is not running or has no
workers yet; and which requests go out. The fake stands in for Ray's dashboard only to give
answers a real one gives in states that are slow or costly to reach (a Ray started without
profiling, a job waiting in the queue); the answers are Ray 2.60's own words
(dashboard/modules/reporter/reporter_head.py). The real profile of a training worker is in
tests/run/test_run_control.py (embedded Ray) and tests/cluster/shared_cluster/test_profile.py
(simulated hosts)."""
from __future__ import annotations

import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestrator.cli import main
from orchestrator.errors import JobError
from orchestrator.observe.profile import NO_MEMRAY, ON_A_CLUSTER, ON_EMBEDDED, profile_job
from orchestrator.reach.endpoint import EMBEDDED, Endpoint
from orchestrator.state import UP, ClusterRecord, cluster_key

TOKEN = "tok-profile-test"
RAY_REFUSAL = ("Profiling is disabled by default for security reasons. To enable profiling, set "
               "the environment variable RAY_DASHBOARD_ENABLE_PROFILING=1 on the Ray head node. "
               "See https://docs.ray.io/en/latest/ray-observability/user-guides/profiling.html "
               "for details.")
WORKER = {"actor_id": "a1", "class_name": "RayTrainWorker", "state": "ALIVE", "job_id": "02000000",
          "pid": 4242, "node_id": "ab" * 28}


class FakeDashboard:
    """Ray's dashboard as far as `profile` asks it: a job, its actors, the profiling routes."""

    def __init__(self, *, status: str = "RUNNING", workers: list | None = None,
                 enabled: bool | None = False, memray: bool = True) -> None:
        self.status, self.enabled, self.memray = status, enabled, memray
        self.workers = [WORKER] if workers is None else workers
        self.asked: list[tuple[str, dict, str | None]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                fake.asked.append((url.path, urllib.parse.parse_qs(url.query),
                                   self.headers.get("Authorization")))
                code, body, kind = fake.answer(url.path)
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)

    def answer(self, path: str) -> tuple[int, bytes, str]:
        def ok(data) -> tuple[int, bytes, str]:
            return 200, json.dumps(data).encode(), "application/json"

        if path == "/api/jobs/job-1":
            return ok({"status": self.status, "job_id": "02000000"})
        if path == "/api/profiling_enabled" and self.enabled is not None:
            return ok({"result": True, "msg": "", "data": {"profilingEnabled": self.enabled}})
        if path == "/api/v0/actors":
            return ok({"result": True, "msg": "",
                       "data": {"result": {"total": len(self.workers), "result": self.workers}}})
        if path == "/memory_profile" and self.enabled:
            # Ray 2.60 (reporter_head.memory_profile): memray's HTML, or a 500 with the words of
            # profile_manager when the agent finds no memray on its PATH
            if not self.memray:
                return 500, b"Failed to execute: memray is not installed", "text/plain"
            return 200, b"<html><title>memray</title>loop (train.py:3)</html>", "text/html"
        if path in ("/worker/traceback", "/worker/cpu_profile"):
            if not self.enabled:
                return 403, RAY_REFUSAL.encode(), "text/plain"
            if path == "/worker/traceback":
                return 200, b"Thread 1 (active): \"MainThread\"\n    loop (train.py:3)\n", \
                    "text/plain"
            return 200, b"<svg>loop (train.py:3)</svg>", "image/svg+xml"
        return 404, b"404: Not Found", "text/plain"

    def __enter__(self) -> FakeDashboard:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def endpoint(fake: FakeDashboard, via: str = "direct") -> Endpoint:
    label = "the embedded Ray" if via == EMBEDDED else "cluster c"
    return Endpoint(fake.address, TOKEN, label, via)


@pytest.mark.parametrize("enabled", [False, None], ids=["ray-says-off", "refused-on-ask"])
@pytest.mark.parametrize("via, hint", [("direct", ON_A_CLUSTER), (EMBEDDED, ON_EMBEDDED)])
def test_profiling_off_says_which_setting_turns_it_on(tmp_path, enabled, via, hint):
    """Ray's /api/profiling_enabled says off, or (a Ray without that route) the profile request
    itself is refused 403: either way, the setting to change, for a cluster or the embedded
    Ray; no file written."""
    with FakeDashboard(enabled=enabled) as fake, pytest.raises(JobError) as raised:
        profile_job(endpoint(fake, via), "job-1", folder=tmp_path / "out", duration=1)
    assert raised.value.message.startswith(
        f"profiling is off on {'the embedded Ray' if via == EMBEDDED else 'cluster c'}")
    assert raised.value.hint == hint and "profiling: true" in hint
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert {auth for _, _, auth in fake.asked} == {f"Bearer {TOKEN}"}


@pytest.mark.parametrize("status, workers, words", [
    ("SUCCEEDED", None, "job job-1 is not running (SUCCEEDED): it has ended"),
    ("PENDING", None, "job job-1 is not running (PENDING): it waits in the queue"),
    ("RUNNING", [], "job job-1 has no Ray Train workers running yet on cluster c"),
])
def test_a_job_not_running_or_without_workers_is_said(tmp_path, status, workers, words):
    with FakeDashboard(status=status, workers=workers, enabled=True) as fake, \
            pytest.raises(JobError, match=re.escape(words)):
        profile_job(endpoint(fake), "job-1", folder=tmp_path / "out", duration=1)


def test_each_worker_is_asked_by_pid_and_node_and_its_files_written(tmp_path):
    with FakeDashboard(enabled=True) as fake:
        profile = profile_job(endpoint(fake), "job-1", folder=tmp_path / "out", duration=3)
    [done] = profile.workers
    assert done.error is None and done.flamegraph and done.stack
    assert done.flamegraph.read_bytes() == b"<svg>loop (train.py:3)</svg>"
    assert "loop (train.py:3)" in done.stack.read_text()
    [actors] = [query for path, query, _ in fake.asked if path == "/api/v0/actors"]
    assert list(zip(actors["filter_keys"], actors["filter_values"], strict=True)) == [
        ("job_id", "02000000"), ("class_name", "RayTrainWorker"), ("state", "ALIVE")]
    [cpu] = [query for path, query, _ in fake.asked if path == "/worker/cpu_profile"]
    assert cpu == {"pid": ["4242"], "node_id": [WORKER["node_id"]], "native": ["0"],
                   "duration": ["3"], "format": ["flamegraph"]}
    assert TOKEN not in "".join(p.read_text() for p in (tmp_path / "out").iterdir())


def cluster_at(state, address: str) -> None:
    state.secrets.put(cluster_key("c"), TOKEN)
    state.store.write_cluster(ClusterRecord(name="c", provider="local", file="/c.yaml",
                                            config_hash="h", state=UP, head_ip="127.0.0.1",
                                            address=address))


def test_the_command_exits_non_zero_with_the_setting_and_no_traceback(state, tmp_path, capsys):
    with FakeDashboard(enabled=False) as fake:
        cluster_at(state, fake.address)
        code = main(["profile", "job-1", "--cluster", "c", "--output", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err and not out
    assert "ERROR profiling is off on cluster c" in err
    assert "TIP   add `profiling: true` to the cluster file and `orchestrate up` it" in err


def test_the_command_prints_where_the_files_are(state, tmp_path, capsys):
    with FakeDashboard(enabled=True) as fake:
        cluster_at(state, fake.address)
        code = main(["profile", "job-1", "--cluster", "c", "--duration", "2",
                     "--output", str(tmp_path / "o"), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    found = json.loads(out)
    assert found["job_id"] == "job-1" and found["target"] == "cluster c"
    assert [w["flamegraph"] for w in found["workers"]] == [str(tmp_path / "o" /
                                                                "worker-0-pid4242.svg")]
    assert json.dumps(found, sort_keys=True, indent=2) == out.strip()   # sorted keys


def test_duration_out_of_range_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["profile", "job-1", "--duration", "61"])
    assert raised.value.code == 2
    assert "expected whole seconds from 1 to 60" in capsys.readouterr().err


def test_rows_ray_gives_without_a_usable_pid_are_skipped(tmp_path):
    """Ray's answer is data: a row whose pid is not a number names no process to profile."""
    odd = [dict(WORKER, pid="4242; rm -rf /"), dict(WORKER, pid=None), dict(WORKER, pid=True)]
    with FakeDashboard(workers=[*odd, WORKER], enabled=True) as fake:
        profile = profile_job(endpoint(fake), "job-1", folder=tmp_path / "out", duration=1)
    assert [w.worker.pid for w in profile.workers] == [4242]


def test_an_output_that_is_a_file_is_said_without_a_traceback(state, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("mine")
    with FakeDashboard(enabled=True) as fake:
        cluster_at(state, fake.address)
        code = main(["profile", "job-1", "--cluster", "c", "--output", str(taken)])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err and "internal error" not in err
    assert f"cannot make the folder {taken} for the profiles" in err
    assert taken.read_text() == "mine"


def test_workers_are_asked_at_most_eight_at_once_in_order_and_a_failure_raised():
    from orchestrator.observe.profile import _each

    lock, now, most = threading.Lock(), [0], [0]

    def ask(index: int, item: str) -> str:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        threading.Event().wait(0.02)
        with lock:
            now[0] -= 1
        return f"{index}:{item}"

    items = [f"w{i}" for i in range(20)]
    assert _each(ask, items) == [f"{i}:w{i}" for i in range(20)]
    assert 1 < most[0] <= 8

    def fails(index: int, item: str) -> str:
        raise JobError(f"worker {item} is gone")
    with pytest.raises(JobError, match="worker w0 is gone"):
        _each(fails, items[:1])


def test_ctrl_c_ends_a_profile_without_waiting_for_the_answers_in_flight():
    """A 60 s profile of many workers, interrupted: the command ends at once (a thread pool's
    threads were joined at exit, minutes later)."""
    import subprocess
    import sys

    script = (
        "import os, signal, threading, time\n"
        "from orchestrator.observe.profile import _each\n"
        "threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "try:\n"
        "    _each(lambda i, w: time.sleep(120), list(range(16)))\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)   # asked to sleep 120 s: only an end without waiting fits
    assert done.stdout.strip() == "interrupted", done.stderr


def test_memory_profile_is_asked_after_the_cpu_profile_and_written_beside_it(tmp_path):
    """`--memory`: the dashboard's memray flame graph, asked once py-spy is done with the
    process (both attach to it), for the same duration, as HTML beside the others."""
    with FakeDashboard(enabled=True) as fake:
        profile = profile_job(endpoint(fake), "job-1", folder=tmp_path / "out", duration=2,
                              memory=True)
    [done] = profile.workers
    assert done.error is None and done.memory == tmp_path / "out" / "worker-0-pid4242.memory.html"
    assert "memray" in done.memory.read_text()
    assert profile.as_dict()["memory"] is True
    assert profile.as_dict()["workers"][0]["memory"] == str(done.memory)
    paths = [path for path, _, _ in fake.asked]
    assert paths.index("/memory_profile") > paths.index("/worker/cpu_profile")
    [memory] = [query for path, query, _ in fake.asked if path == "/memory_profile"]
    assert memory == {"pid": ["4242"], "node_id": [WORKER["node_id"]], "native": ["0"],
                      "duration": ["2"], "format": ["flamegraph"]}


def test_without_memory_no_memory_profile_is_asked(tmp_path):
    with FakeDashboard(enabled=True) as fake:
        [done] = profile_job(endpoint(fake), "job-1", folder=tmp_path / "out",
                             duration=1).workers
    assert done.memory is None and "/memory_profile" not in [p for p, _, _ in fake.asked]


def test_memray_missing_where_the_job_runs_is_said_with_what_to_install(tmp_path, capsys):
    """The CPU profile and the stacks are still written; the memory profile's failure says
    where memray is missing and how it comes."""
    with FakeDashboard(enabled=True, memray=False) as fake:
        profile = profile_job(endpoint(fake), "job-1", folder=tmp_path / "out", duration=1,
                              memory=True)
    [done] = profile.workers
    assert done.flamegraph and done.stack and done.memory is None
    assert done.error and done.error.startswith("memory: ")
    assert "memray is not installed" in done.error and NO_MEMRAY in done.error
