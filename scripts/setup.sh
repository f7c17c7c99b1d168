#!/usr/bin/env bash
# Set up what the quick start needs, and nothing else: a virtual environment in .venv with torch
# pinned to the CPU build, and orchestrate (editable) with Ray. No system packages, no sudo, no
# test tools: scripts/setup-dev.sh (which scripts/test.sh runs) adds those.
# Safe to re-run: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[ray]"
