"""The fake of Ray's Job API (tests/fake_ray.py) checked against a real Ray: the same requests go
to both, and their answers must agree in status, shape (keys and value types) and the texts
orchestrate reads (a missing job, a submission id taken, a missing token). A route the fake
answers differently from Ray fails here, not in the tests that trust the fake.

The real side is the ray tier's shared embedded Ray (token auth on); one job of `true` is
submitted to it."""
from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request

import pytest

from orchestrator.util.waiting import until
from tests.fake_ray import FakeRay

pytestmark = [pytest.mark.ray]


def ask(address: str, path: str, token: str | None, body: dict | None = None) -> tuple[int, object]:
    """(status, JSON or text) of one request, with the token as Ray's clients send it."""
    request = urllib.request.Request(
        address + path, method="POST" if body is not None else "GET",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json",
                 **({"Authorization": f"Bearer {token}"} if token else {})})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as answer:
            status, text = answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def shape(value: object) -> object:
    """Keys and value types, not values: {"status": "str", "end_time": "int|None", ...}."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def same_keys(real: dict, fake: dict) -> None:
    assert sorted(real) == sorted(fake), (sorted(set(real) - set(fake)),
                                          sorted(set(fake) - set(real)))


def test_the_fake_job_api_answers_as_a_real_ray_does(local_ray, shared_ray):
    real, token = local_ray.address, shared_ray.token
    job = f"contract-{secrets.token_hex(4)}"
    submit = {"entrypoint": "true", "submission_id": job, "metadata": {"experiment": "contract"},
              "runtime_env": {}}
    with FakeRay(token=token) as fake:
        answers = {}
        for side, address in (("real", real), ("fake", fake.address)):
            posted = ask(address, "/api/jobs/", token, submit)
            if side == "real":   # the job runs to its end, so that its record is complete
                assert until(lambda: ask(real, f"/api/jobs/{job}", token)[1]["status"]
                             in ("SUCCEEDED", "FAILED"), timeout=120, interval=0.5), \
                    ask(real, f"/api/jobs/{job}", token)
            else:
                fake.jobs[job].update(status="SUCCEEDED", start_time=1, end_time=2,
                                      driver_exit_code=0, message="done")
            answers[side] = {
                "version": ask(address, "/api/version", token),
                "submit": posted,
                "again": ask(address, "/api/jobs/", token, submit),
                "job": ask(address, f"/api/jobs/{job}", token),
                "table": ask(address, "/api/jobs/", token),
                "logs": ask(address, f"/api/jobs/{job}/logs", token),
                "missing": ask(address, "/api/jobs/no-such-job", token),
                "no token": ask(address, "/api/jobs/", None),
            }
    real_answers, fake_answers = answers["real"], answers["fake"]

    status, version = real_answers["version"]
    assert status == 200 and fake_answers["version"][0] == 200
    same_keys(version, fake_answers["version"][1])
    assert version["version"] == fake_answers["version"][1]["version"]
    assert version["ray_version"] == fake_answers["version"][1]["ray_version"]

    assert real_answers["submit"] == (200, {"job_id": job, "submission_id": job})
    assert fake_answers["submit"] == real_answers["submit"]

    # a submission id taken: Ray's head passes on its job agent's refusal as a 500 whose
    # traceback holds the text orchestrate recognises its own job by (clients.jobs)
    assert real_answers["again"][0] == fake_answers["again"][0] == 500, real_answers["again"]
    for side in (real_answers, fake_answers):
        assert f"ValueError: Job with submission_id {job} already exists. Please use a " \
            "different submission_id." in side["again"][1], side["again"][1]

    # one job's record: the same fields; the same types where the fake fills them
    assert real_answers["job"][0] == fake_answers["job"][0] == 200
    real_job, fake_job = real_answers["job"][1], fake_answers["job"][1]
    same_keys(real_job, fake_job)
    for key in ("type", "submission_id", "status", "entrypoint", "metadata", "start_time",
                "end_time", "driver_exit_code"):
        assert shape(real_job[key]) == shape(fake_job[key]), (key, real_job[key], fake_job[key])
    assert (real_job["type"], real_job["metadata"]) == (fake_job["type"], fake_job["metadata"])

    # the table: a list of such records (the real one holds other tests' jobs too)
    assert real_answers["table"][0] == fake_answers["table"][0] == 200
    [listed] = [j for j in real_answers["table"][1] if j.get("submission_id") == job]
    same_keys(listed, fake_answers["table"][1][0])

    assert real_answers["logs"][0] == fake_answers["logs"][0] == 200
    assert shape(real_answers["logs"][1]) == shape(fake_answers["logs"][1]) == {"logs": "str"}

    # a job that is not there: 404 and text naming it
    assert real_answers["missing"][0] == fake_answers["missing"][0] == 404
    assert "no-such-job" in real_answers["missing"][1]
    assert "no-such-job" in fake_answers["missing"][1]

    # no token: 401, with nothing of the table
    assert real_answers["no token"][0] == fake_answers["no token"][0] == 401
    assert job not in json.dumps(real_answers["no token"][1])
