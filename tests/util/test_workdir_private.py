"""What never leaves this machine with a job's working_dir (orchestrator.util.workdir.private):
files that hold a credential by name or content, and files or folders their owner made private.
The walk that finds them feeds both ways a working_dir is shipped (the Job API's upload, whose
excludes Ray applies, and a RayJob's package store), so a refusal here stops both."""
from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.errors import SpecError
from orchestrator.language.experiment import load_experiment
from orchestrator.run.experiment import RunOptions, prepare
from orchestrator.util.workdir import DEFAULT_EXCLUDES, scan
from tests.run.test_prepare import experiment

# Not a key: the shape of one (a PEM block's markers around a base64 body).
BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7" * 3
PRIVATE_KEY = f"-----BEGIN PRIVATE KEY-----\n{BODY}\n-----END PRIVATE KEY-----\n"
CERTIFICATE = f"-----BEGIN CERTIFICATE-----\n{BODY}\n-----END CERTIFICATE-----\n"


def write(root: Path, files: dict[str, str], mode: int = 0o755) -> Path:
    """`files` under `root` (0644, or the mode after a `:` in the name), `root` itself `mode`."""
    for spec, text in files.items():
        name, _, private = spec.partition(":")
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.chmod(path, int(private, 8) if private else 0o644)
    os.chmod(root, mode)
    return root


def refused(root: Path, excludes: tuple[str, ...] = DEFAULT_EXCLUDES) -> dict[str, str]:
    """Each refused path (the start of its message) -> its whole message and hint."""
    with pytest.raises(SpecError) as caught:
        scan(root, excludes)
    return {p.message.split(" ", 1)[0]: p.format() for p in caught.value.problems}


def secrets_beside_code(root: Path) -> None:
    write(root, {"train.py": "print(1)\n", ".env": "API_KEY=abc\n", "id_rsa": "not shown\n",
                 "id_rsa.pub": "ssh-ed25519 AAAA\n", ".env.example": "API_KEY=\n",
                 "notes.txt:600": "mine\n"})


def test_secret_names_and_owner_only_files_are_refused_each_named_with_how_to_leave_it_out(
        tmp_path):
    root = tmp_path / "code"
    root.mkdir()
    secrets_beside_code(root)
    found = refused(root)
    assert sorted(found) == [".env", "id_rsa", "notes.txt"]   # not the .pub, not the template
    for name, text in found.items():
        assert f'add "/{name}" to runtime_env.excludes' in text and ".gitignore" in text, text
        assert "not shown" not in text and "abc" not in text   # named, never read out
    assert "dotenv" in found[".env"] and "from_env" in found[".env"]
    assert "SSH private key" in found["id_rsa"]
    assert "mode 0600" in found["notes.txt"] and "chmod g+r notes.txt" in found["notes.txt"]


def test_run_refuses_them_before_any_ray_and_ships_them_to_no_one_once_excluded(tmp_path,
                                                                               capsys):
    """`run` (and `render`, `apply`: the same walk) refuses before a Ray is asked for anything;
    with `runtime_env.excludes`, Ray's own upload (its `_zip_files`, given the job's excludes)
    and the walk leave them out alike."""
    from ray._private.runtime_env.packaging import _zip_files

    path = experiment(tmp_path / "exp")
    secrets_beside_code(tmp_path / "exp")
    with pytest.raises(SpecError) as caught:
        prepare(load_experiment(path), RunOptions(), lambda _: None)
    assert sorted(p.message.split(" ", 1)[0] for p in caught.value.problems) == \
        [".env", "id_rsa", "notes.txt"]
    assert all(p.field == "working_dir" for p in caught.value.problems)
    assert main(["render", str(path)]) == 1
    err = capsys.readouterr().err
    assert "ERROR" in err and ".env would be shipped" in err and "Traceback" not in err

    path = experiment(tmp_path / "kept", runtime_env={"excludes": ["/.env", "id_rsa",
                                                                   "notes.txt"]})
    secrets_beside_code(tmp_path / "kept")
    plan = prepare(load_experiment(path), RunOptions(), lambda _: None)
    excludes = plan.runtime_env["excludes"]
    _zip_files(str(tmp_path / "kept"), excludes, str(tmp_path / "ray.zip"), include_gitignore=True)
    with zipfile.ZipFile(tmp_path / "ray.zip") as archive:
        uploaded = set(archive.namelist())
    assert {"train.py", ".env.example", "id_rsa.pub"} <= uploaded
    assert not {".env", "id_rsa", "notes.txt"} & uploaded
    assert [n for n, _ in scan(tmp_path / "kept", tuple(excludes)).files] == sorted(
        n for n in uploaded if not n.endswith("/"))


def test_a_gitignore_that_lists_them_is_enough(tmp_path):
    root = tmp_path / "code"
    root.mkdir()
    secrets_beside_code(root)
    (root / ".gitignore").write_text(".env\nid_rsa\nnotes.txt\n")
    assert [n for n, _ in scan(root, DEFAULT_EXCLUDES).files] == [
        ".env.example", ".gitignore", "id_rsa.pub", "train.py"]


def test_modes_say_nothing_in_a_working_dir_open_to_its_owner_only(tmp_path):
    """Under a umask of 077 every file is 0600 and every folder 0700: only names and contents
    count there."""
    root = tmp_path / "code"
    root.mkdir()
    write(root, {"train.py:600": "print(1)\n", "lib/model.py:600": "x = 1\n"}, mode=0o700)
    os.chmod(root / "lib", 0o700)
    assert [n for n, _ in scan(root, DEFAULT_EXCLUDES).files] == ["lib/model.py", "train.py"]
    (root / ".env").write_text("A=1\n")
    assert list(refused(root)) == [".env"]


def test_a_private_folder_ships_its_readable_files_and_refuses_its_private_ones(tmp_path):
    """A folder's mode says little (tempfile.mkdtemp, `mktemp -d` and pytest make them 0700):
    its files are judged each by its own."""
    root = tmp_path / "code"
    root.mkdir()
    write(root, {"train.py": "print(1)\n", "data/a.csv": "a\n", "data/notes.txt": "n\n"})
    os.chmod(root / "data", 0o700)
    os.chmod(root / "data" / "notes.txt", 0o600)
    found = refused(root)
    assert list(found) == ["data/notes.txt"]
    assert "a file open to its owner only (mode 0600)" in found["data/notes.txt"]
    os.chmod(root / "data" / "notes.txt", 0o644)
    assert [n for n, _ in scan(root, DEFAULT_EXCLUDES).files] == [
        "data/a.csv", "data/notes.txt", "train.py"]


def test_private_keys_and_tokens_are_found_by_their_content(tmp_path):
    """A Google service account's key file is JSON with a PEM key in it; a certificate is
    public; code that merely names the markers holds no key; a .pypirc holds a password only
    when one is written in it."""
    root = tmp_path / "code"
    root.mkdir()
    account = json.dumps({"type": "service_account", "private_key": PRIVATE_KEY})
    write(root, {"train.py": "print(1)\n", "gcp-project-3f2a.json": account,
                 "certs/server.pem": PRIVATE_KEY, "certs/ca.pem": CERTIFICATE,
                 "find_keys.py": 'MARK = ("-----BEGIN PRIVATE KEY-----", "-----END ")\n',
                 "upload/.pypirc": "[pypi]\nusername = __token__\npassword = pypi-abc\n",
                 "index/.pypirc": "[distutils]\nindex-servers = pypi\n",
                 "tls/server.key": "anything\n"})
    found = refused(root)
    assert sorted(found) == ["certs/server.pem", "gcp-project-3f2a.json", "tls/server.key",
                             "upload/.pypirc"]
    assert "private key (a PEM block)" in found["gcp-project-3f2a.json"]
    assert "pypi-abc" not in found["upload/.pypirc"]


def test_orchestrates_own_package_is_not_judged_by_its_modes(tmp_path):
    root = tmp_path / "pkg"
    root.mkdir()
    write(root, {"module.py:600": "x = 1\n"})
    assert [n for n, _ in scan(root, DEFAULT_EXCLUDES, refuse_private=False).files] == \
        ["module.py"]


def test_a_private_folder_whose_files_are_all_excluded_is_not_refused(tmp_path):
    """An exclude such as `/keys/` leaves out the folder's files (Ray, and this walk, still
    enter it): nothing of it is shipped, so nothing is refused."""
    root = tmp_path / "code"
    root.mkdir()
    write(root, {"train.py": "print(1)\n", "keys/a.txt": "a\n"})
    os.chmod(root / "keys", 0o700)
    os.chmod(root / "keys" / "a.txt", 0o600)
    assert [n for n, _ in scan(root, (*DEFAULT_EXCLUDES, "/keys/")).files] == ["train.py"]


def test_a_dangling_link_is_neither_shipped_nor_refused(tmp_path):
    root = tmp_path / "code"
    root.mkdir()
    write(root, {"train.py": "print(1)\n"})
    (root / "gone").symlink_to(tmp_path / "nowhere")
    assert [n for n, _ in scan(root, DEFAULT_EXCLUDES).files] == ["train.py"]
