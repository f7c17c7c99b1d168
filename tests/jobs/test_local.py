"""The embedded local Ray: private temp dir and ports, shared by concurrent runs, stopped by the
last one, and nothing left behind."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.jobs import local

pytestmark = pytest.mark.ray


def ray_processes(temp_dir: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if temp_dir.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_started_reused_and_stopped_by_the_last_user():
    with local.session() as (ray, started):
        assert started and ray.address.startswith("http://127.0.0.1:")
        assert len(ray.temp_dir) < 30  # unix socket paths under it stay short
        assert ray_processes(ray.temp_dir)
        with local.session() as (again, started_again):  # a second run reuses it
            assert again.pid == ray.pid and not started_again
        assert local.current() is not None  # the first user is still running
    assert local.current() is None
    assert ray_processes(ray.temp_dir) == []
    assert not os.path.exists(ray.temp_dir)


def test_kept_for_a_detached_job_until_shutdown():
    try:
        with local.session(keep=True) as (ray, _):
            pass
        assert local.current() is not None and local.current().pid == ray.pid
    finally:
        assert local.shutdown()
    assert ray_processes(ray.temp_dir) == []
    assert not local.shutdown()
