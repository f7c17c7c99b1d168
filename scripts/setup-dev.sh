#!/usr/bin/env bash
# Set up a machine to develop and test orchestrate: what scripts/setup.sh sets up for the quick
# start, and then the system packages of the SSH tier and the dashboard's browser test (as root),
# the dev extras (test tools, every cloud SDK, ruff, mypy, pre-commit) and the MLflow server's venv.
# scripts/test.sh runs it. Safe to re-run: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/torch.sh

need_apt=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need_apt+=(openssh-client)
command -v rsync >/dev/null 2>&1 || need_apt+=(rsync)
# The tests look for processes on the hosts with pgrep.
command -v pgrep >/dev/null 2>&1 || need_apt+=(procps)
# The simulated hosts of the cluster tests: network namespaces and veth (iproute2), PID and mount
# namespaces (util-linux's unshare and nsenter).
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || need_apt+=(iproute2)
command -v nsenter >/dev/null 2>&1 || need_apt+=(util-linux)
# `profile --memory`'s test: memray attaches to a worker through gdb.
command -v gdb >/dev/null 2>&1 || need_apt+=(gdb)
# A Python without Ray, put first on a test host's PATH as a pyenv .bashrc would (Debian's).
[ -x /usr/bin/python3 ] || need_apt+=(python3)
# The dashboard's test in a real headless browser (Selenium drives Debian's build: browsers
# that download themselves at install time cannot be fetched on these machines).
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
[ -x /usr/bin/chromedriver ] || need_apt+=(chromium-driver)
[ -d /usr/share/fonts/truetype/liberation ] || need_apt+=(fonts-liberation)  # a readable screenshot
# Installed beside the Python packages below (apt and uv share nothing; a new machine saved the
# time of the shorter of the two), its output kept in a file and shown if it fails.
apt_setup=
apt_log=$(mktemp)
trap 'rm -f "$apt_log"' EXIT
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        ( export DEBIAN_FRONTEND=noninteractive
          apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
        ) > "$apt_log" 2>&1 &
        apt_setup=$!
    else
        echo "setup-dev: please install ${need_apt[*]} (Debian packages) for the SSH cluster tests" >&2
    fi
fi

# The Python packages with uv, in one resolve: it downloads and compiles in parallel, where pip
# does one file at a time (a fresh setup measured 46 s against 106 s with pip, the same versions;
# 2026-11-27, 2 cores). uv is itself a wheel from PyPI, put in the venv; the quick start
# (scripts/setup.sh) keeps plain pip. torch's build is chosen as there (scripts/torch.sh); where
# PyTorch's index is added, uv takes the best version from every index, as pip does (its default
# would take numpy and the rest from PyTorch's index too). uv reads no pip configuration, so the
# folders of local wheels pip is told of (find-links, in pip.conf or PIP_FIND_LINKS: where
# the CPU build of torch lies; without them PyPI's torch is the multi-GB CUDA build) and pip's
# timeout are passed on.
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
[ -x .venv/bin/uv ] || .venv/bin/python -m pip install -q --disable-pip-version-check "uv==0.13.9"
links=()
while read -r -a folders; do
    for folder in "${folders[@]}"; do links+=(--find-links "$folder"); done
done < <(.venv/bin/python -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'\$/\1/p")
export UV_HTTP_TIMEOUT=${UV_HTTP_TIMEOUT:-${PIP_DEFAULT_TIMEOUT:-180}}
install() { .venv/bin/uv pip install -q --compile-bytecode "${links[@]}" --python "$@"; }

# The tracking tests' MLflow server (`mlflow server`, SQLite backend), in a venv of its own: the
# full mlflow package pins pyarrow below what Ray uses here; the project needs only the client.
# Installed beside the project's packages.
mlflow_setup=
if [ ! -x .venv-mlflow/bin/mlflow ]; then
    ( "$PYTHON" -m venv .venv-mlflow && install .venv-mlflow/bin/python "mlflow==3.17.2" ) &
    mlflow_setup=$!
fi
torch_install_args .venv/bin/python
strategy=()
[ -n "$TORCH_INDEX" ] && strategy=(--index-strategy unsafe-best-match)
install .venv/bin/python "${TORCH_ARGS[@]}" "${strategy[@]}" -e ".[dev]"
if [ -n "$mlflow_setup" ]; then
    wait "$mlflow_setup" || { echo "setup-dev: the MLflow server's venv (.venv-mlflow) failed" >&2; exit 1; }
fi
if [ -n "$apt_setup" ]; then
    wait "$apt_setup" || { cat "$apt_log" >&2
                           echo "setup-dev: apt-get install ${need_apt[*]} failed" >&2; exit 1; }
fi

# Bytecode for the project's own code and any package installed without it: this machine kind's
# environment sets PYTHONDONTWRITEBYTECODE, so nothing is cached as it is imported (scripts/bytecode.py).
.venv/bin/python scripts/bytecode.py
