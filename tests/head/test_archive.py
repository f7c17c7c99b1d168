"""The head's log archiver (`orchestrator.head.archive`): the layout, the session logs' bound,
S3 through moto's server, and how `logs` and `runs` read a cluster's archive once the cluster
is forgotten (`cluster.archive.find_job`).

Ray's job API is played by tests/test_archive.py's loopback server (the two GETs the archiver
makes); the archiver on a real head, over SSH, is tests/cluster/shared_cluster/test_archive.py."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orchestrator.cluster import archive as cluster_archive
from orchestrator.head import archive
from orchestrator.state import State
from tests.moto_server import client, make_bucket
from tests.test_archive import FAILED_LOG, NOW, TOKEN, cli

AT = 1_800_000_000.0


def config(location: str | None = None) -> dict:
    found = {"cluster_name": "c1", "head_start_ray_commands": ["ray start --head"]}
    if location:
        found["metadata"] = {"orchestrate": {"archive": location}}
    return found


def session(tmp_path: Path, sizes: dict[str, int]) -> str:
    """A session's logs folder: files of `sizes` bytes, the first named the oldest."""
    logs = tmp_path / "session" / "logs"
    for age, (name, size) in enumerate(reversed(list(sizes.items()))):
        path = logs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x" * size)
        os.utime(path, (AT - age, AT - age))
    return str(logs)


def test_the_layout_private_no_secrets_and_the_session_logs_bounded(ray, tmp_path):
    ray.job("done", "FAILED", FAILED_LOG, message="boom")
    ray.job("busy", "RUNNING", "epoch 1\n", end=None)
    logs = session(tmp_path, {"old.log": 500, "events/mid.log": 300, "new.log": 400})
    target = tmp_path / "kept"
    written = archive.run(config(f"file://{target}"), "Idle for 60 min", {"idle_s": 3600},
                          at=AT, address=ray.address, token=TOKEN, session_logs=logs,
                          budget=800)
    folder = target / "c1" / "20270115T080000Z-idle-for-60-min"
    assert written == f"file://{folder}"
    assert {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} == {
        "jobs.json", "jobs/done.log", "jobs/busy.log", "README", "stopped.json",
        "session/new.log", "session/events/mid.log"}   # newest first, within 800 bytes
    for path in [target, *target.rglob("*")]:
        assert path.stat().st_mode & 0o777 == (0o700 if path.is_dir() else 0o600), path
    assert (folder / "jobs" / "done.log").read_text() == FAILED_LOG
    table = json.loads((folder / "jobs.json").read_text())
    assert [j["submission_id"] for j in table] == ["busy", "done"]
    assert table[1]["status"] == "FAILED" and table[1]["entrypoint"] == "python -m secret-stuff"
    assert table[1]["env_var_names"] == ["X"] and "hidden" not in (folder / "jobs.json").read_text()
    assert json.loads((folder / "stopped.json").read_text()) == \
        {"reason": "Idle for 60 min", "at": AT, "idle_s": 3600}
    readme = (folder / "README").read_text()
    assert "2 kept, 1 left out" in readme and "old.log 500" in readme


def test_no_location_is_the_heads_folder_and_a_log_the_api_refuses_is_the_drivers_file(
        ray, tmp_path):
    ray.job("done", "SUCCEEDED", "from the API\n")
    ray.failing = True
    logs = session(tmp_path, {"job-driver-done.log": 3})
    written = archive.run(config(), "down", {}, at=AT, address=ray.address, token=TOKEN,
                          session_logs=logs)
    folder = Path.home() / ".orchestrate" / "archive" / "c1" / "20270115T080000Z-down"
    assert written == f"file://{folder}"
    assert (folder / "jobs" / "done.log").read_text() == "xxx"


def test_nothing_to_archive_and_a_table_that_cannot_be_read(ray, tmp_path):
    ray.close()   # nothing listens there now
    assert archive.run(config(), "down", {}, address=ray.address, token=TOKEN,
                       session_logs=str(tmp_path / "none")) is None
    logs = session(tmp_path, {"raylet.out": 5})
    written = archive.run(config(), "down", {}, at=AT, address=ray.address, token=TOKEN,
                          session_logs=logs)
    readme = (Path(written.removeprefix("file://")) / "README").read_text()
    assert "job table could not be read" in readme


def test_s3_through_moto_and_read_back_once_the_cluster_is_forgotten(ray, tmp_path, moto_server,
                                                                    monkeypatch):
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    make_bucket(moto_server, "logs")
    ray.job("done", "FAILED", FAILED_LOG, message="boom")
    ray.job("busy", "RUNNING", "epoch 1\n", end=None)
    where = archive.run(config("s3://logs/team"), "down", {}, at=AT, address=ray.address,
                        token=TOKEN, session_logs=session(tmp_path, {"raylet.out": 5}))
    assert where == "s3://logs/team/c1/20270115T080000Z-down"
    keys = {o["Key"] for o in client(moto_server, "s3").list_objects_v2(Bucket="logs")["Contents"]}
    assert "team/c1/20270115T080000Z-down/jobs/done.log" in keys
    assert "team/c1/20270115T080000Z-down/session/raylet.out" in keys

    # an earlier archive without the job, and one of another run of it: the newest is read
    archive.run(config("s3://logs/team"), "down", {}, at=AT - 3600, address=ray.address,
                token=TOKEN, session_logs=str(tmp_path / "none"))
    kept = cluster_archive.find_job("c1", "done", config("s3://logs/team"))
    assert kept is not None and kept.status == "FAILED" and kept.log() == FAILED_LOG
    assert kept.log_path.is_relative_to(cluster_archive.local_folder("c1"))
    busy = cluster_archive.find_job("c1", "busy", config("s3://logs/team"))
    assert busy.stopped_with_ray and busy.reason() == "stopped with cluster c1 while RUNNING"
    assert cluster_archive.find_job("c1", "done", config()) is None   # not remembered here
    cluster_archive.remember("c1", where)                             # as `down` does
    assert cluster_archive.find_job("c1", "done", None).status == "FAILED"
    assert cluster_archive.find_job("c1", "../x", None) is None
    assert cluster_archive.find_job("../c1", "done", None) is None


def test_logs_and_runs_read_a_forgotten_clusters_archive(ray, capsys):
    state = State.here()
    ray.job("done", "FAILED", FAILED_LOG, start=NOW - 120)
    ray.job("busy", "RUNNING", "epoch 1\n", start=NOW - 120, end=None)
    for job_id in ("done", "busy", "other"):
        state.store.record_job(job_id, cluster="c1", experiment="/x/e.yaml", name="e")
        state.store.update_job(job_id, {"submitted_at": NOW - 100})
    older = cluster_archive.local_folder("c1") / "20270101T000000Z-down"
    for folder, at in ((older, AT - 86400), (cluster_archive.local_folder("c1") /
                                              archive.archive_name("down", AT), AT)):
        staging = folder.with_name(folder.name + ".staging")
        staging.mkdir(parents=True)
        archive.build(staging, list(ray.jobs.values()), dict(ray.logs), reason="down", at=at,
                      details={}, session_logs=None)
        archive.publish(staging, str(folder))
        cluster_archive.remember("c1", str(folder))
        ray.logs["done"] = "the later run's log\n"   # in the newer archive, written second
    code, out, err = cli("logs", "done")
    assert (code, out) == (0, "the later run's log\n"), err   # newest archive: the last remembered
    assert "cluster c1 no longer has job done (FAILED); its log as kept when it was " \
           "archived" in err
    code, out, err = cli("logs", "done", "--cluster", "c1", "--follow")
    assert code == 1 and "job done: FAILED" in err
    code, out, err = cli("logs", "other")
    assert code == 1 and "no cluster 'c1' is recorded" in err

    assert cli("runs", "--format", "json")[0] == 0
    rows = {row["job_id"]: row for row in json.loads(cli("runs", "--format", "json")[1])}
    assert rows["done"]["status"] == "FAILED" and rows["busy"]["status"] == "STOPPED"
    assert rows["other"]["status"] == "UNKNOWN"
    assert state.store.job("done")["status"] == "FAILED"


def test_job_logs_are_capped_and_no_session_file_holds_a_secret_or_a_saved_log_twice(
        ray, tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "JOB_LOG_CAP", 10)
    monkeypatch.setattr(archive, "JOB_LOGS_BUDGET", 25)
    ray.job("old", "SUCCEEDED", "o" * 8, start=NOW - 300)
    ray.job("mid", "SUCCEEDED", "m" * 8, start=NOW - 200)
    ray.job("new", "FAILED", "n" * 25 + "the end\n", start=NOW - 100)
    logs = session(tmp_path, {"runtime_env_agent.log": 3, "runtime_env_agent.log.1": 3,
                              "runtime_env_setup-02000000.log": 3,   # env var values, maybe
                              "job-driver-new.log": 4, "job-driver-gone.log": 4,
                              "job-driver-old.log": 4,   # left out of jobs/: not back uncapped
                              "raylet.out": 5})
    written = archive.run(config(f"file://{tmp_path / 'kept'}"), "down", {}, at=AT,
                          address=ray.address, token=TOKEN, session_logs=logs)
    folder = Path(written.removeprefix("file://"))
    assert (folder / "jobs" / "new.log").read_text() == "nnthe end\n"   # its last 10 bytes
    assert (folder / "jobs" / "mid.log").read_text() == "m" * 8
    assert not (folder / "jobs" / "old.log").exists()                   # 26 bytes > 25
    assert sorted(p.name for p in (folder / "session").iterdir()) == \
        ["job-driver-gone.log", "raylet.out"]
    readme = (folder / "README").read_text()
    assert "jobs/new.log: cut to its last 10 bytes (23 bytes left out)" in readme
    assert "jobs/old.log: left out (8 bytes)" in readme
    assert "runtime_env*.log left out" in readme


def test_a_reply_that_is_not_json_loses_no_archive(ray, tmp_path):
    ray.job("done", "SUCCEEDED", "from the API\n")
    ray.garbled = True
    logs = session(tmp_path, {"job-driver-done.log": 3})
    written = archive.run(config(), "down", {}, at=AT, address=ray.address, token=TOKEN,
                          session_logs=logs)
    folder = Path(written.removeprefix("file://"))
    assert "job table could not be read" in (folder / "README").read_text()
    assert (folder / "session" / "job-driver-done.log").read_text() == "xxx"
    from orchestrator.head.session import open_logs

    opened = open_logs(logs)
    assert opened is not None
    with opened:
        assert archive.driver_log(ray.address, TOKEN, "done", opened) == "xxx"   # the file's


@pytest.mark.parametrize("reason, expected", [("down", "down"), ("Max uptime!", "max-uptime"),
                                              ("", "stopped")])
def test_slug(reason, expected):
    assert archive.slug(reason) == expected


# --- Ray's temp folder, which other users of the head can write to (Ray 2.60: 0777) ---------

SECRET = "SECRET-do-not-archive"
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="gives files to another user (chown)")


def secrets_of_ours(tmp_path: Path) -> Path:
    """A folder of ours with secrets, as the head's home: the token, the cluster's key, and a
    file with a log's name."""
    home = tmp_path / "home"
    home.mkdir()
    for name in ("auth_token", "ray_bootstrap_key.pem", "secret.log"):
        (home / name).write_text(SECRET)
    return home


def ray_temp(tmp_path: Path, name: str = "session_2026-12-01_10-00-00_000001_42") -> Path:
    """Ray 2.60's temp folder: everything 0777, no sticky bit; `session_latest` the link to
    its newest session (absolute, as Ray writes it). The session's logs folder."""
    root = tmp_path / "ray"
    logs = root / name / "logs"
    (logs / "events").mkdir(parents=True)
    (logs / "raylet.out").write_text("raylet's own\n")
    (logs / "events" / "event_GCS.log").write_text("gcs's own\n")
    for folder in (root, root / name, logs, logs / "events"):
        folder.chmod(0o777)
    (root / "session_latest").symlink_to(root / name)
    return logs


def archived_text(written: str) -> str:
    folder = Path(written.removeprefix("file://"))
    return "".join(path.read_text(errors="replace") for path in folder.rglob("*")
                   if path.is_file())


@needs_root
def test_only_rays_log_files_of_ours_are_copied_from_the_session(ray, tmp_path):
    home = secrets_of_ours(tmp_path)
    logs = ray_temp(tmp_path)
    (logs / "linked.log").symlink_to(home / "secret.log")             # a link to a secret
    (logs / "events" / "home").symlink_to(home)                       # a link to a folder
    os.link(home / "secret.log", logs / "hard.log")                   # a second name for it
    (logs / "auth_token").write_text(SECRET)                          # not a log's name
    (logs / "ray_bootstrap_key.pem").write_text(SECRET)
    (logs / "theirs.log").write_text(SECRET)                          # another user's file
    os.chown(logs / "theirs.log", 65534, 65534)
    (logs / "folder").mkdir()                                         # another user's folder
    (logs / "folder" / "raylet.out").write_text(SECRET)
    os.chown(logs / "folder", 65534, 65534)
    os.mkfifo(logs / "pipe.log")                                      # would block a reader
    (logs / "job-driver-done.log").symlink_to(home / "secret.log")    # the driver log's file
    ray.job("done", "FAILED", "from the API\n")
    ray.failing = True                                                # so the file is read
    written = archive.run(config(), "down", {}, at=AT, address=ray.address, token=TOKEN,
                          session_logs=str(logs.parents[1] / "session_latest" / "logs"))
    folder = Path(written.removeprefix("file://"))
    kept = folder / "session"
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*") if p.is_file()) == \
        ["events/event_GCS.log", "raylet.out"]
    assert SECRET not in archived_text(written)
    assert (folder / "jobs" / "done.log").read_text() == ""
    readme = (folder / "README").read_text()
    assert "left out: 9 files not Ray's logs or not ours" in readme
    assert "writable by other users (Ray 2.60 makes /tmp/ray so)" in readme


def swapped(tmp_path: Path, how: str) -> str:
    """What another user can do to Ray 2.60's temp folder: the logs folder the archiver is
    given, with the head's secrets behind it (a folder of ours, `secrets_of_ours`)."""
    home = secrets_of_ours(tmp_path)
    logs = ray_temp(tmp_path)
    root = logs.parents[1]
    theirs = tmp_path / "theirs" / "session_2026-12-01_10-00-00_000002_43"
    theirs.mkdir(parents=True)
    (theirs / "logs").symlink_to(home)
    if how == "elsewhere":              # session_latest pointing out of Ray's temp folder
        (root / "session_latest").unlink()
        (root / "session_latest").symlink_to(theirs)
    elif how == "relative":
        (root / "session_latest").unlink()
        (root / "session_latest").symlink_to(f"../theirs/{theirs.name}")
    elif how == "their session":        # a session folder of theirs in Ray's temp folder
        (root / theirs.name).mkdir()
        (root / theirs.name / "logs").symlink_to(home)
        os.chown(root / theirs.name, 65534, 65534)
        (root / "session_latest").unlink()
        (root / "session_latest").symlink_to(root / theirs.name)
    elif how == "logs link":            # our session's logs renamed, a link in their place
        logs.rename(logs.with_name("moved"))
        logs.symlink_to(home)
    elif how == "their temp folder":    # /tmp/ray made by another user before Ray
        os.chown(root, 65534, 65534)
    elif how == "temp folder link":
        root.rename(root.with_name("real-ray"))
        root.symlink_to(root.with_name("real-ray"))
    elif how == "open parent":          # a folder above Ray's temp folder others can write
        root.parent.chmod(0o777)
    return str(root / "session_latest" / "logs")


@needs_root
@pytest.mark.parametrize("how, why", [
    ("elsewhere", "{tmp}/ray/session_latest points to '{tmp}/theirs/session_2026-12-01_10-00-"
                  "00_000002_43', not to a session_* folder of {tmp}/ray"),
    ("relative", "{tmp}/ray/session_latest points to '../theirs/session_2026-12-01_10-00-00_"
                 "000002_43', not to a session_* folder of {tmp}/ray"),
    ("their session", "{tmp}/ray/session_2026-12-01_10-00-00_000002_43 belongs to another user "
                      "(uid 65534)"),
    ("logs link", "{tmp}/ray/session_2026-12-01_10-00-00_000001_42/logs cannot be opened as a "
                  "folder"),
    ("their temp folder", "Ray's temp folder {tmp}/ray belongs to another user (uid 65534)"),
    ("temp folder link", "Ray's temp folder {tmp}/ray cannot be opened as a folder"),
    ("open parent", "{tmp} is writable by others (mode 777, not sticky)"),
])
def test_a_swapped_session_folder_is_refused_and_the_readme_says_so(ray, tmp_path, how, why):
    ray.job("done", "SUCCEEDED", "from the API\n")
    written = archive.run(config(), "down", {}, at=AT, address=ray.address, token=TOKEN,
                          session_logs=swapped(tmp_path, how))
    assert written is not None and SECRET not in archived_text(written)
    folder = Path(written.removeprefix("file://"))
    assert not (folder / "session").exists()
    assert (folder / "jobs" / "done.log").read_text() == "from the API\n"   # the rest is kept
    readme = (folder / "README").read_text()
    assert "note: Ray's session logs left out: " + why.format(tmp=tmp_path) in readme
