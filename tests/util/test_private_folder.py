"""`private_folder` makes the folder and every missing parent 0700, whatever the umask."""
from __future__ import annotations

import os
import stat

from orchestrator.util.files import private_folder


def test_missing_parents_are_private_too(tmp_path):
    old = os.umask(0o022)
    try:
        made = private_folder(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", made):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
