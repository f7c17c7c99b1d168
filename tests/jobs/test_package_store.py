"""A RayJob's package store on a `file://` volume (orchestrator.jobs.package_store): what the
pods' own user can read, and what an interrupted upload leaves. Ray fetching from such a store
is tests/jobs/test_rayjob_submitter.py."""
from __future__ import annotations

import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.jobs import package_store
from orchestrator.util.workdir import DEFAULT_EXCLUDES, WorkingDir, scan


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


def test_file_store_zips_are_readable_by_the_pods_user(tmp_path, usual_umask):
    """The zips are code, not secrets, read by the pods' own user: 0644, in a folder others
    may enter, not 0600 as a temporary file is made."""
    store = tmp_path / "store"
    uris = package_store.put(f"file://{store}", code(tmp_path), lambda _: None)
    zips = sorted(store.iterdir())
    assert [p.name for p in zips] == sorted(Path(uri).name for uri in uris.values())
    assert {stat.S_IMODE(p.stat().st_mode) for p in zips} == {0o644}
    assert stat.S_IMODE(store.stat().st_mode) == 0o755


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
