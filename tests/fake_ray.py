"""Ray's dashboard as orchestrate's clients ask it, on 127.0.0.1 in this process: the one fake
of Ray's Job API (and of Serve's GET) the tests share, for what a real Ray cannot be made to do
(fail a request, hold a job that ended an hour ago, answer garbage, refuse a submission twice
while its job agent starts).

    with FakeRay(token="t") as ray:       # ray.address, ray.port
        ray.job("s-1", "SUCCEEDED", "its log\n")
        ...

Routes, as Ray 2.60 answers them (tests/clients/test_fake_ray.py sends the same requests to
this fake and to a real Ray and compares the answers):
    GET  /api/version                  {"version", "ray_version", "ray_commit", "session_name"}
    GET  /api/jobs/                    the job table: a list of job records
    GET  /api/jobs/<id>                one record; 404 and text when there is none
    GET  /api/jobs/<id>/logs           {"logs": text}
    POST /api/jobs/                    submit: {"job_id", "submission_id"}; a submission id
                                       taken: 500 and a traceback ending in Ray's text
    GET, PUT /api/packages/<uri>       a package's presence; an upload
    GET  /api/serve/applications/      Serve's state (by default: never started)

With a `token`, every request without `Authorization: Bearer <token>` gets 401, as Ray's token
authentication answers. `before(handler, count)` may answer the count-th submission itself,
creating no job (return True); `after`, the same once the job exists.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MS = 1000
# Ray 2.60's answer on a Ray where Serve was never started: no controller, no application.
NO_SERVE = {"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": None}


def job_record(job_id: str, status: str, *, entrypoint: str = "true", start: float | None = None,
               end: float | None = None, message: str = "", metadata: dict | None = None,
               runtime_env: dict | None = None, exit_code: int | None = None) -> dict[str, Any]:
    """A job as Ray's job table holds a submission (times in ms, as Ray gives them)."""
    return {"type": "SUBMISSION", "job_id": None, "submission_id": job_id, "driver_info": None,
            "status": status, "entrypoint": entrypoint, "message": message, "error_type": None,
            "start_time": int(start * MS) if start is not None else None,
            "end_time": int(end * MS) if end is not None else None,
            "metadata": metadata or {}, "runtime_env": runtime_env or {},
            "driver_agent_http_address": None, "driver_node_id": None,
            "driver_exit_code": exit_code}


class FakeRay:
    def __init__(self, *, token: str | None = None, before=None, after=None) -> None:
        import ray

        self.token = token
        self.jobs: dict[str, dict[str, Any]] = {}
        self.table: list[dict[str, Any]] | None = None   # set: GET /api/jobs/ answers it as is
        self.logs: dict[str, str] = {}
        self.packages: set[str] = set()
        self.posts: list[dict[str, Any]] = []
        self.seen: list[str | None] = []            # each request's Authorization header
        self.log_requests: list[str] = []
        self.serve: tuple[int, object] = (200, NO_SERVE)
        self.failing = False    # log requests answer 500
        self.garbled = False    # answers that are not JSON (a proxy's error page)
        self.version = {"version": "4", "ray_version": ray.__version__,
                        "ray_commit": ray.__commit__, "session_name": "session_fake"}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args) -> None:
                pass

            def send(self, status: int, body: object, kind: str = "application/json") -> None:
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def refused(self) -> bool:
                fake.seen.append(self.headers.get("Authorization"))
                if fake.token is not None and \
                        self.headers.get("Authorization") != f"Bearer {fake.token}":
                    self.send(401, "Unauthorized: missing or invalid authentication token",
                              "text/plain")
                    return True
                if fake.garbled:
                    self.send(200, "<html>Bad Gateway</html>", "text/html")
                    return True
                return False

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.refused():
                    return None
                parts = self.path.split("?")[0].strip("/").split("/")
                if self.path == "/api/version":
                    return self.send(200, fake.version)
                if self.path == "/api/serve/applications/":
                    return self.send(*fake.serve)
                if parts[:2] == ["api", "packages"]:
                    return self.send(200 if parts[-1] in fake.packages else 404, "")
                if parts[:2] == ["api", "jobs"] and len(parts) == 2:
                    return self.send(200, fake.table if fake.table is not None
                                     else list(fake.jobs.values()))
                if parts[:2] == ["api", "jobs"] and len(parts) == 3 and parts[2] in fake.jobs:
                    return self.send(200, fake.jobs[parts[2]])
                if parts[:2] == ["api", "jobs"] and len(parts) == 4 and parts[3] == "logs" \
                        and parts[2] in fake.jobs:
                    fake.log_requests.append(parts[2])
                    if fake.failing:
                        return self.send(500, "broken", "text/plain")
                    return self.send(200, {"logs": fake.logs.get(parts[2], "")})
                if parts[:2] == ["api", "jobs"]:
                    return self.send(404, f"Job {parts[2] if len(parts) > 2 else ''} does not "
                                          "exist", "text/plain")
                return self.send(404, "Not Found", "text/plain")

            def do_PUT(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.refused():
                    return
                fake.packages.add(self.path.rsplit("/", 1)[1])
                self.send(200, "")

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.refused():
                    return
                fake.posts.append(body)
                if before is not None and before(self, len(fake.posts)):
                    return
                job_id = body.get("submission_id") or f"raysubmit_{len(fake.posts)}"
                if job_id in fake.jobs:   # Ray's head passes on its job agent's refusal
                    self.send(500, "Traceback (most recent call last):\n  ...\nRuntimeError: "
                                   "Request failed with status code 400: Traceback (most recent "
                                   "call last):\n  ...\nValueError: Job with submission_id "
                                   f"{job_id} already exists. Please use a different "
                                   "submission_id.\n", "text/plain")
                    return
                fake.jobs[job_id] = job_record(job_id, "PENDING", entrypoint=body["entrypoint"],
                                               metadata=body.get("metadata"),
                                               runtime_env=body.get("runtime_env"))
                if after is not None and after(self, len(fake.posts)):
                    return
                self.send(200, {"job_id": job_id, "submission_id": job_id})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.address = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def job(self, job_id: str, status: str, log: str = "", **fields: Any) -> dict[str, Any]:
        """A job in the table (fields as `job_record` takes them), with its log."""
        self.jobs[job_id] = job_record(job_id, status, **fields)
        self.logs[job_id] = log
        return self.jobs[job_id]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def __enter__(self) -> FakeRay:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
