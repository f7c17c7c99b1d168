"""Compile to bytecode what the tests import and nothing cached: the project's own code (installed
editable, so no installer compiles it) and any installed top-level folder whose first Python file
has no bytecode (one put in a venv made before, without compiling).

Where PYTHONDONTWRITEBYTECODE is set (this machine kind's environment sets it), Python never
writes what it compiles, so every process compiled each module it imported anew: `import
tensorflow` took 20 s against 9 s compiled, in each of a Keras run's workers (2026-12-02). A
source newer than its bytecode is still read from source (Python compares the two).

    .venv/bin/python scripts/bytecode.py     (scripts/setup-dev.sh runs it)
"""
from __future__ import annotations

import compileall
import importlib.util
import re
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("orchestrator", "tests", "benchmarks", "scripts")
# Files no Python 3.11 compiles (torch's helpers for a later Python); said by compileall, skipped.
SKIP = re.compile(r"py31[2-9]|python3\.1[2-9]")


def uncompiled_packages(site: Path) -> list[Path]:
    """Top-level folders (packages, namespace packages too) whose first Python file has no
    bytecode beside it."""
    found = []
    for folder in sorted(site.iterdir()):
        if not folder.is_dir() or folder.name.endswith((".dist-info", "__pycache__")):
            continue
        first = next((f for f in sorted(folder.rglob("*.py")) if not SKIP.search(str(f))), None)
        if first is not None and not Path(importlib.util.cache_from_source(str(first))).exists():
            found.append(folder)
    return found


def main() -> int:
    site = Path(sysconfig.get_paths()["purelib"])
    folders = [ROOT / name for name in PROJECT if (ROOT / name).is_dir()]
    folders += uncompiled_packages(site)
    for folder in folders:
        compileall.compile_dir(folder, quiet=2, workers=0, rx=SKIP)
    print(f"bytecode: {len(folders)} folders compiled ({', '.join(f.name for f in folders)})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
