"""An archive is data from the cluster's side (issue 49): a head, or another user writing where
archives are kept, may put symbolic links (and FIFOs) in one. The copy `down` makes of the
head's folder (real rsync, with the `-avz` Ray's `rsync-down` passes) loses them and changes
the mode of nothing they point at; `logs` and `runs` never print a link's target; a job's log is
never written through a link or into a folder others may write."""
from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from orchestrator import launch
from orchestrator.cluster import archive
from orchestrator.errors import ClusterError
from orchestrator.state import ClusterRecord, State
from tests.moto_server import client, make_bucket

JOB = "job-1"
STAMP = "20261126T120000Z-down"
SECRET = "aws_secret_access_key = wJalrXUtnFEMI-not-in-any-output"


def cli(*args: str) -> tuple[int, str, str]:
    from orchestrator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def outside(tmp_path) -> Path:
    """Files of this machine's user outside any archive: a secret (0600), a file others may
    read (0644) and a folder (0755)."""
    folder = tmp_path / "outside"
    (folder / "shared").mkdir(parents=True)
    os.chmod(folder / "shared", 0o755)
    (folder / "credentials").write_text(SECRET + "\n")
    os.chmod(folder / "credentials", 0o600)
    (folder / "notes.txt").write_text("for everyone\n")
    os.chmod(folder / "notes.txt", 0o644)
    return folder


class Head:
    """The launch backend of a cluster whose head ran the archiver (exit 0) and whose rsync is
    a real rsync from a folder here standing for the head's home, with Ray's own flags."""

    FEATURES = frozenset({launch.Feature.SHELL_ON_HEAD})

    def __init__(self, home: Path, fill) -> None:
        self.home, self.fill, self.copied = home, fill, []

    def exec(self, record, command, *, tty=None, in_container=True) -> int:
        return 0

    def rsync(self, record, *, down, source, target, all_nodes=False) -> None:
        head_folder = Path(source.replace("~", str(self.home), 1))
        self.fill(head_folder)
        subprocess.run(["rsync", "-avz", f"{head_folder}/", target], check=True,
                       capture_output=True)
        self.copied.append(target)


def hostile_archive(outside: Path):
    def fill(folder: Path) -> None:
        (folder / "jobs").mkdir(parents=True)
        (folder / "jobs.json").write_text(json.dumps([{"submission_id": JOB, "status": "FAILED"}]))
        (folder / "jobs" / f"{JOB}.log").write_text("a line\n")
        (folder / "jobs" / "job-2.log").symlink_to(outside / "notes.txt")
        # relative, resolving to the secret from where the copy lands here
        here = archive.local_folder("c") / folder.name / "jobs"
        (folder / "jobs" / "job-3.log").symlink_to(os.path.relpath(outside / "credentials", here))
        (folder / "session").symlink_to(outside / "shared")
        os.mkfifo(folder / "jobs" / "pipe")
        os.chmod(folder / "jobs", 0o777)   # rsync -a brings the head's modes too
    return fill


def down(head: Head, monkeypatch) -> tuple[str, list[str]]:
    monkeypatch.setattr(launch, "backend", lambda record, state, progress=None: head)
    said: list[str] = []
    record = ClusterRecord(name="c", provider="local", file="/c.yaml", config_hash="x",
                           head_ip="10.0.0.2")
    where = archive.keep_logs(record, {"cluster_name": "c"}, State.here(), said.append)
    return where, said


def test_the_copy_of_the_heads_archive_loses_its_links_and_changes_no_mode_outside(
        outside, tmp_path, monkeypatch):
    before = {p: mode(p) for p in (outside, outside / "shared", outside / "notes.txt",
                                    outside / "credentials")}
    head = Head(tmp_path / "head-home", hostile_archive(outside))
    where, said = down(head, monkeypatch)

    assert {p: mode(p) for p in before} == before      # nothing outside made 0600 / 0700
    copy = Path(where)
    assert head.copied == [f"{copy}/"] and archive.remembered("c") == [where]
    kept = {str(p.relative_to(copy)) for p in copy.rglob("*")}
    assert kept == {"jobs", f"jobs/{JOB}.log", "jobs.json"}   # no link, no FIFO
    for path in [copy, *copy.rglob("*")]:
        assert mode(path) == (0o700 if path.is_dir() else 0o600), path
    assert any(line.startswith("  removed 4 symbolic link(s) or special file(s) from the copy "
                               "of the head's archive") for line in said), said
    found = archive.find_job("c", JOB, None)
    assert found is not None and found.log() == "a line\n"


@pytest.mark.parametrize("planted", ["a link", "writable by others"])
def test_no_copy_is_made_through_a_link_or_into_a_folder_others_may_write(
        outside, tmp_path, monkeypatch, planted):
    folder = archive.local_folder("c")
    folder.parent.mkdir(parents=True)
    if planted == "a link":
        folder.symlink_to(outside / "shared", target_is_directory=True)
    else:
        folder.mkdir(mode=0o700)
        os.chmod(folder, 0o777)
    head = Head(tmp_path / "head-home", lambda at: (at.mkdir(parents=True),
                                                    (at / "jobs.json").write_text("[]")))
    with pytest.raises(ClusterError) as caught:
        down(head, monkeypatch)
    why = "is a symbolic link" if planted == "a link" else "is writable by other users"
    assert caught.value.message.startswith("nothing was written into ")
    assert f"{folder} {why}" in caught.value.message
    assert "folders of your own that only you may write" in caught.value.hint
    assert head.copied == [] and list((outside / "shared").iterdir()) == []
    assert mode(outside / "shared") == 0o755


def remembered_archive(outside: Path, planted: str) -> Path:
    """An archive copied here before links were dropped (or changed since), remembered."""
    folder = archive.local_folder("c") / STAMP
    folder.mkdir(parents=True)
    (folder / "jobs.json").write_text(json.dumps([{"submission_id": JOB, "status": "FAILED",
                                                   "message": "boom"}]))
    if planted == "the log":
        (folder / "jobs").mkdir()
        (folder / "jobs" / f"{JOB}.log").symlink_to(outside / "credentials")
    else:   # the folder of logs: a link to one holding the secret under the log's name
        (outside / "planted").mkdir()
        os.symlink(outside / "credentials", outside / "planted" / f"{JOB}.log")
        (folder / "jobs").symlink_to(outside / "planted", target_is_directory=True)
    archive.remember("c", str(folder))
    State.here().store.record_job(JOB, cluster="c", experiment="/x/e.yaml", name="e")
    return folder


@pytest.mark.parametrize("planted", ["the log", "the folder of logs"])
def test_logs_and_runs_never_print_what_a_link_in_an_archive_points_at(outside, planted):
    folder = remembered_archive(outside, planted)
    code, out, err = cli("logs", JOB)
    assert SECRET not in out + err
    link = folder / "jobs" / (f"{JOB}.log" if planted == "the log" else "")
    assert code == 1 and "Traceback" not in err
    assert f"the archive {folder} was not read: {str(link).rstrip('/')} is a symbolic link" \
        in err
    assert "orchestrate follows no link in one" in err

    code, out, err = cli("runs", "--format", "json")
    assert code == 0 and SECRET not in out + err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"warning: the archive {folder} was not read: {str(link).rstrip('/')} is a symbolic "
        "link (an archive holds only files and folders")
    assert mode(outside / "credentials") == 0o600


@pytest.mark.parametrize("planted", ["a link", "writable by others"])
def test_a_log_read_from_s3_is_not_written_through_a_link_or_into_a_shared_folder(
        aws_env, outside, planted):
    make_bucket(aws_env, "logs")
    s3 = client(aws_env, "s3")
    s3.put_object(Bucket="logs", Key=f"p/c/{STAMP}/jobs.json", Body=json.dumps(
        [{"submission_id": JOB, "status": "FAILED", "message": "boom"}]))
    s3.put_object(Bucket="logs", Key=f"p/c/{STAMP}/jobs/{JOB}.log", Body=b"line\n")
    copy = archive.local_folder("c") / STAMP
    copy.mkdir(parents=True)
    if planted == "a link":
        (copy / "jobs").symlink_to(outside / "shared", target_is_directory=True)
    else:
        (copy / "jobs").mkdir()
        os.chmod(copy / "jobs", 0o777)
    with pytest.raises(ClusterError) as caught:
        archive.find_job("c", JOB, {"metadata": {"orchestrate": {"archive": "s3://logs/p"}}})
    why = "is a symbolic link" if planted == "a link" else "is writable by other users"
    assert f"{copy / 'jobs'} {why}" in caught.value.message
    assert list((outside / "shared").iterdir()) == []
    assert not (copy / "jobs" / f"{JOB}.log").exists()


def test_a_fifo_in_a_files_place_is_refused_at_once(tmp_path):
    from orchestrator.util.files import Refused, open_below

    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(Refused, match="is not a regular file"):
        open_below(tmp_path, tmp_path / "pipe")
