#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export AWS_EC2_METADATA_DISABLED=true NO_GCE_CHECK=true RAY_USAGE_STATS_ENABLED=0
exec .venv/bin/python -m pytest -ra "$@"
