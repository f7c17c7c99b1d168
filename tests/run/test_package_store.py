"""A RayJob's package store (orchestrator.run.package_store): who may read a `file://` one,
what an interrupted upload leaves, and a zip someone else put under the name `run` would name.
Ray fetching from such a store is tests/run/test_rayjob_submitter.py."""
from __future__ import annotations

import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.errors import ClusterError
from orchestrator.run import package_store
from orchestrator.util.workdir import DEFAULT_EXCLUDES, WorkingDir, scan
from tests.launch.test_kuberay_backend import (  # noqa: F401 - fixtures
    NAMESPACE,
    kube,
    own_cluster_experiment,
    quick_jobs,
)
from tests.moto_server import aws_env, moto_server  # noqa: F401 - fixtures


@pytest.fixture
def usual_umask() -> Iterator[None]:
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def code(tmp_path: Path) -> WorkingDir:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    return scan(tmp_path / "code", DEFAULT_EXCLUDES, include_gitignore=False)


def test_file_store_zips_are_for_the_pods_user_and_group_only(tmp_path, usual_umask):
    """The zips are the job's code, read by the pods' user as their owner or through their
    group: 0640 in a 0750 folder, not 0600 as a temporary file is made, nor for everyone."""
    store = tmp_path / "store"
    uris = package_store.put(f"file://{store}", code(tmp_path), lambda _: None)
    zips = sorted(store.iterdir())
    assert [p.name for p in zips] == sorted(Path(uri).name for uri in uris.values())
    assert {stat.S_IMODE(p.stat().st_mode) for p in zips} == {0o640}
    assert stat.S_IMODE(store.stat().st_mode) == 0o750


def test_a_store_folder_others_could_enter_and_zips_written_before_are_tightened(
        tmp_path, usual_umask):
    store = tmp_path / "store"
    shipped = code(tmp_path)
    uris = package_store.put(f"file://{store}", shipped, lambda _: None)
    os.chmod(store, 0o2755)   # setgid: zips take the folder's group, which the pods may be in
    for uri in uris.values():
        os.chmod(path_of(uri), 0o644)   # as earlier builds wrote them
    said: list[str] = []
    package_store.put(f"file://{store}", shipped, said.append)
    assert stat.S_IMODE(store.stat().st_mode) == 0o2750
    assert {stat.S_IMODE(path_of(uri).stat().st_mode) for uri in uris.values()} == {0o640}
    assert any("others may no longer enter it (mode 2755 -> 2750)" in line for line in said)


def test_a_store_folder_every_user_may_write_is_refused_and_left_as_it_is(tmp_path):
    """Anyone could swap a zip in it between the check and the pods' read; and closing it
    (`file:///tmp` as root) is not this command's to do."""
    store = tmp_path / "store"
    store.mkdir()
    os.chmod(store, 0o1777)
    with pytest.raises(ClusterError) as caught:
        package_store.put(f"file://{store}", code(tmp_path), lambda _: None)
    assert "may be written by every user of this machine" in caught.value.message
    assert list(store.iterdir()) == [] and stat.S_IMODE(store.stat().st_mode) == 0o1777


def path_of(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def tampered(original: Path, replace: dict[str, bytes]) -> bytes:
    """The zip at `original` with the entries in `replace` changed or added (same name)."""
    from io import BytesIO

    out = BytesIO()
    with zipfile.ZipFile(original) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(info, replace.pop(info.filename, source.read(info)))
        for name, data in replace.items():
            target.writestr(zipfile.ZipInfo(name, package_store.ZIP_TIME), data)
    return out.getvalue()


@pytest.mark.parametrize("change", ["content", "added", "not a zip"])
def test_a_zip_replaced_under_its_name_is_refused_and_left_there(tmp_path, change):
    """Whoever can write the store could put other code under the name the next `run` names:
    the zip there is read back and refused unless it holds exactly these files."""
    store = tmp_path / "store"
    shipped = code(tmp_path)
    uris = package_store.put(f"file://{store}", shipped, lambda _: None)
    stored = path_of(uris["working_dir"])
    evil = {"content": {"working_dir/train.py": b"import os; os.system('id')\n"},
            "added": {"working_dir/sitecustomize.py": b"import os\n"}}.get(change)
    bad = tampered(stored, dict(evil)) if evil else b"PK not really"
    stored.write_bytes(bad)
    with pytest.raises(ClusterError) as caught:
        package_store.put(f"file://{store}", shipped, lambda _: None)
    message = caught.value.message
    assert str(stored) in message and "refused, no RayJob names it" in message
    assert {"content": "its working_dir/train.py is not the file here",
            "added": "it also holds working_dir/sitecustomize.py",
            "not a zip": "not a zip that reads"}[change] in message
    assert f"rm {stored}" in (caught.value.hint or "")
    assert stored.read_bytes() == bad   # not overwritten: left there to look at


def test_an_unchanged_zip_in_the_store_is_reused(tmp_path):
    store = tmp_path / "store"
    shipped = code(tmp_path)
    package_store.put(f"file://{store}", shipped, lambda _: None)
    said: list[str] = []
    package_store.put(f"file://{store}", shipped, said.append)
    assert len([line for line in said if "in the store already" in line]) == 2


def test_a_zip_replaced_in_an_s3_store_is_refused(tmp_path, aws_env):  # noqa: F811
    """The same check on a bucket (moto's server on loopback, boto3 real)."""
    from tests.moto_server import client, make_bucket

    make_bucket(aws_env, "packages")
    shipped = code(tmp_path)
    uris = package_store.put("s3://packages/p", shipped, lambda _: None)
    key = uris["working_dir"].removeprefix("s3://packages/")
    mine = tmp_path / "mine.zip"
    client(aws_env, "s3").download_file("packages", key, str(mine))
    client(aws_env, "s3").put_object(Bucket="packages", Key=key, Body=tampered(
        mine, {"working_dir/train.py": b"print('not yours')\n"}))
    with pytest.raises(ClusterError) as caught:
        package_store.put("s3://packages/p", shipped, lambda _: None)
    assert "its working_dir/train.py is not the file here" in caught.value.message
    assert f"aws s3 rm {uris['working_dir']}" in (caught.value.hint or "")


def test_an_interrupted_upload_leaves_nothing_in_the_store(tmp_path, monkeypatch):
    """Ctrl-C once a zip is written, before it is renamed into place: neither a zip at its final
    name (which the next `run` would take for a whole one) nor the partial file stays; the next
    `put` writes it whole."""
    store = tmp_path / "store"
    shipped = code(tmp_path)

    def interrupted(source, target):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", interrupted)
        with pytest.raises(KeyboardInterrupt):
            package_store.put(f"file://{store}", shipped, lambda _: None)
    assert list(store.iterdir()) == []
    uris = package_store.put(f"file://{store}", shipped, lambda _: None)
    for uri in uris.values():
        with zipfile.ZipFile(Path(uri.removeprefix("file://"))) as archive:
            assert archive.testzip() is None


def test_run_names_no_replaced_zip_in_a_rayjob(tmp_path, capsys, kube, quick_jobs):  # noqa: F811
    """`orchestrate run` of an `own_cluster` experiment whose working_dir zip is in the store
    already, under its name, with other code in it: exit 1, and no RayJob is made (the fake
    API server of tests/kube_api.py)."""
    from orchestrator.cli import main
    from orchestrator.language.experiment import load_experiment
    from orchestrator.render.experiment import ship
    from orchestrator.render.packages import uris

    path = own_cluster_experiment(tmp_path)
    spec = load_experiment(path)
    target = path_of(uris(spec.document["own_cluster"]["package_store"], ship(spec))["working_dir"])
    target.parent.mkdir(parents=True)
    with zipfile.ZipFile(target, "w") as planted:
        planted.writestr("working_dir/e.yaml", "import os; os.system('id')\n")
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{target} in the package store is not the zip of the files its name claims" in err
    assert "Traceback" not in err
    assert kube.objects("rayjobs", NAMESPACE) == {}
