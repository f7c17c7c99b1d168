#!/usr/bin/env bash
# Set up (scripts/setup-dev.sh: what the quick start needs, then the tests' tools and system
# packages), then lint, type-check and run the test suite tier by tier (scripts/tiers.py): fast
# (no Ray, no SSH) and local (the embedded Ray's own life cycle) side by side, then ray (the
# local Ray) and many (ten runs at once) side by side, then ssh (simulated hosts), stopping at
# the first stage that fails and printing each tier's time beside its budget.
#   bash scripts/test.sh              everything
#   bash scripts/test.sh fast         one tier (or: local, ray, ssh, many; several: fast ray)
#   bash scripts/test.sh ray -k serve what follows the tier names goes to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
bash scripts/setup-dev.sh
export ORCHESTRATE_SETUP_SECONDS=$(( $(date +%s) - started ))
export AWS_EC2_METADATA_DISABLED=true NO_GCE_CHECK=true RAY_USAGE_STATS_ENABLED=0
exec .venv/bin/python scripts/tiers.py "$@"
