#!/usr/bin/env bash
# Set up (scripts/setup.sh), lint and type-check, then run the whole test suite. Extra arguments
# go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The SSH cluster tests need root and a few Debian packages (setup.sh installs them as root):
# fail now, naming what is missing, rather than after the rest of the suite. Leaving them out
# is said on the command line: bash scripts/test.sh -m "not ssh".
case " $* " in
    *"not ssh"*) ;;
    *) .venv/bin/python -m tests.prerequisites ;;
esac
.venv/bin/ruff check orchestrator tests benchmarks scripts
.venv/bin/mypy
export AWS_EC2_METADATA_DISABLED=true NO_GCE_CHECK=true RAY_USAGE_STATS_ENABLED=0
exec .venv/bin/python -m pytest -ra --durations=40 "$@"   # the slowest tests: what the suite costs
