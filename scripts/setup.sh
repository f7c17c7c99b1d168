#!/usr/bin/env bash
# Set up what the quick start needs, and nothing else: a virtual environment in .venv with torch's
# CPU build (ORCHESTRATE_TORCH picks another: scripts/torch.sh), and orchestrate (editable) with
# Ray. No system packages, no sudo, no test tools: scripts/setup-dev.sh (which scripts/test.sh
# runs) adds those. Safe to re-run: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/torch.sh

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# torch first and pinned to its build: an unpinned torch would pull a multi-GB CUDA build.
torch_install_args .venv/bin/python
.venv/bin/python -m pip install -q --disable-pip-version-check "${TORCH_ARGS[@]}" || torch_failed
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[ray]"
