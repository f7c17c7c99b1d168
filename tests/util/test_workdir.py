"""What a job ships as its working_dir: the same files Ray's own packaging zips (the seam is
Ray's `_zip_files`, the function `ray job submit` and JobSubmissionClient use), their size, and
a digest that follows exactly those files."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from orchestrator.util.workdir import DEFAULT_EXCLUDES, excludes_for, scan


def make_tree(root: Path) -> Path:
    files = {
        "train.py": "print('train')\n",
        "lib/model.py": "x = 1\n",
        "lib/__pycache__/model.cpython-311.pyc": "junk",
        ".git/HEAD": "ref: refs/heads/main\n",
        ".venv/bin/python": "not really\n",
        ".env.example": "A=1\n",
        "results/run-1/metrics.json": "[]",
        "data/train.parquet": "P" * 5000,
        "data/notes.txt": "about the data\n",
        "logs/today.log": "log\n",
        "nested/.gitignore": "*.tmp\n",
        "nested/keep.txt": "keep\n",
        "nested/scratch.tmp": "scratch\n",
        ".rayignore": "logs/\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def names(root: Path, excludes: tuple[str, ...]) -> list[str]:
    return [name for name, _ in scan(root, excludes).files]


def test_defaults_user_patterns_storage_and_ignore_files(tmp_path):
    root = make_tree(tmp_path / "project")
    excludes = excludes_for(root, ["data/*.parquet"], [str(root / "results"), "/elsewhere"])
    assert excludes == (*DEFAULT_EXCLUDES, "data/*.parquet", "/results/")
    assert names(root, excludes) == [".env.example", ".rayignore", "data/notes.txt", "lib/model.py",
                                     "nested/.gitignore", "nested/keep.txt", "train.py"]
    shipped = scan(root, excludes)
    assert shipped.size == sum((root / name).stat().st_size for name, _ in shipped.files)


def test_the_same_files_as_rays_own_zip(tmp_path):
    """Ray's packaging, given our excludes, zips exactly the files we list, in a zip whose size
    we predict: what the job ships is what `orchestrate run` says it ships."""
    from ray._private.runtime_env.packaging import _zip_files

    root = make_tree(tmp_path / "project")
    excludes = excludes_for(root, ["data/*.parquet"], [str(root / "results")])
    output = tmp_path / "ray.zip"
    _zip_files(str(root), list(excludes), str(output), include_gitignore=True)
    with zipfile.ZipFile(output) as archive:
        zipped = sorted(i.filename for i in archive.infolist() if not i.is_dir())
    shipped = scan(root, excludes)
    assert zipped == [name for name, _ in shipped.files]
    assert shipped.zip_size == output.stat().st_size


def test_without_gitignore_ray_still_reads_rayignore(tmp_path):
    root = make_tree(tmp_path / "project")
    shipped = scan(root, DEFAULT_EXCLUDES, include_gitignore=False)
    listed = [name for name, _ in shipped.files]
    assert "nested/scratch.tmp" in listed and "logs/today.log" not in listed


def test_digest_follows_shipped_files_only(tmp_path):
    root = make_tree(tmp_path / "project")
    excludes = excludes_for(root, [], [str(root / "results")])
    before = scan(root, excludes).digest()
    (root / "results" / "run-2").mkdir()
    (root / "results" / "run-2" / "metrics.json").write_text("[1]")
    (root / "lib" / "__pycache__" / "other.pyc").write_text("junk")
    assert scan(root, excludes).digest() == before  # results and caches do not change the job
    (root / ".env.example").write_text("A=2\n")
    assert scan(root, excludes).digest() != before  # a dotfile Ray uploads does


@pytest.mark.parametrize("inside", ["/", "results"])
def test_storage_outside_or_the_root_itself_adds_no_pattern(tmp_path, inside):
    root = make_tree(tmp_path / "project")
    folder = "/" if inside == "/" else str(tmp_path / inside)
    assert excludes_for(root, [], [folder, str(root)]) == DEFAULT_EXCLUDES


def test_largest_entries(tmp_path):
    root = make_tree(tmp_path / "project")
    largest = scan(root, DEFAULT_EXCLUDES).largest(2)
    assert largest[0] == ("data/", 5000 + len("about the data\n"))
    assert len(largest) == 2


def test_sizes_read_as_people_write_them():
    from orchestrator.util.text import size_text

    assert size_text(600) == "0.6 KiB"
    assert size_text(3.5 * 2**20) == "3.5 MiB"
    assert size_text(512 * 2**30) == "512.0 GiB"
