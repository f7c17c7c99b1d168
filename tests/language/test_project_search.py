"""Where `orchestrate.yaml` is looked for: walking up from the folder, but never into a folder
someone else could have written (another user's, or one writable by others such as /tmp), and
never above the repository's root. A planted project file chooses the state, the token
references and the files of every command run below it: it is refused, named."""
from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.errors import SpecError
from orchestrator.language.project import find_project, project_for

PLANTED = {"project": "planted", "include": ["*.yaml"], "secrets": "file"}


def write_project(folder: Path, document: dict = PLANTED) -> Path:
    path = folder / "orchestrate.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
                          env={**os.environ, "ORCHESTRATE_HOME": str(cwd / ".home")})


def test_a_project_file_in_a_world_writable_folder_above_is_refused(tmp_path):
    shared = tmp_path / "shared"          # as /tmp: sticky and writable by everyone
    shared.mkdir()
    shared.chmod(0o1777)
    planted = write_project(shared)
    work = shared / "work"
    (work / "clusters").mkdir(parents=True)
    with pytest.raises(SpecError) as error:
        find_project(work / "clusters")
    problem = error.value.problems[0]
    assert problem.file == str(planted)
    assert "anyone may write to it (mode 1777)" in problem.message and "--project" in problem.hint

    done = cli(work, "plan", "--refresh=false")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"{planted}: not used: {shared} is not safe: anyone may write" in done.stderr
    assert not (shared / ".home").exists() and not (work / ".home" / "projects").exists()


def test_a_project_file_in_another_users_folder_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making a folder of another user needs root")
    nobody = pwd.getpwnam("nobody")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    planted = write_project(theirs)
    for path in (theirs, planted):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    mine = theirs / "mine"
    mine.mkdir()
    with pytest.raises(SpecError) as error:
        project_for(None, mine)
    assert error.value.problems[0].file == str(planted)
    assert f"owned by user nobody ({nobody.pw_uid}), not by you or root" in \
        error.value.problems[0].message
    # Named on purpose, it is used (as git's safe.directory).
    assert project_for(str(planted), mine).name == "planted"


def test_a_project_file_writable_by_others_is_refused_in_a_safe_folder(tmp_path):
    planted = write_project(tmp_path)
    planted.chmod(0o666)
    with pytest.raises(SpecError) as error:
        find_project(tmp_path)
    assert f"not used: {planted} is not safe: anyone may write" in str(error.value.problems[0])


def test_the_search_stops_at_the_repository_root(tmp_path):
    write_project(tmp_path)                        # above the repository: another project
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub").mkdir()
    assert find_project(repo / "sub") is None
    mine = write_project(repo, {"project": "mine", "include": ["*.yaml"]})
    assert find_project(repo / "sub") == mine


def test_a_safe_folder_above_is_searched(tmp_path):
    found = write_project(tmp_path, {"project": "p", "include": ["*.yaml"]})
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert find_project(tmp_path / "a" / "b") == found
    assert find_project(tmp_path / "a" / "b" / "file.yaml") == found
