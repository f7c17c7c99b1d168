# Which build of torch the set-up installs; sourced by scripts/setup.sh and scripts/setup-dev.sh.
#
# ORCHESTRATE_TORCH picks it: `cpu` (the default, on any machine), a build of PyTorch's own wheel
# index by its tag (`cu128`, `cu126`, `rocm6.4`, ...: a GPU machine sets the one its driver
# takes), or `pypi` (PyPI's wheel: on Linux x86_64 a multi-GB CUDA build). A tagged build is
# asked for by its local version (torch==2.13.0+cpu) with PyTorch's index for it as an extra
# index, so pip cannot fall back to another build: where that index cannot be reached (these
# project machines reach no host but the package index their pip is pointed at, whose local wheel
# folder holds the CPU build), pip's own sources must hold that build, or the install fails
# naming it. ORCHESTRATE_TORCH_INDEX points at a mirror of PyTorch's index.

TORCH_VERSION=2.13.0

# torch_install_args PYTHON: sets TORCH_ARGS to what pip (or uv) installs torch with.
torch_install_args() {
    local python=$1 build=${ORCHESTRATE_TORCH:-cpu}
    local index=${ORCHESTRATE_TORCH_INDEX:-https://download.pytorch.org/whl}
    case "$build" in
        pypi) TORCH_ARGS=("torch==$TORCH_VERSION"); return ;;
        cpu|cu[0-9]*|rocm[0-9]*|xpu) ;;
        *) echo "setup: ORCHESTRATE_TORCH=$build is not a torch build: use cpu (the default)," \
                "a CUDA tag of PyTorch's index such as cu128, or pypi" >&2
           return 2 ;;
    esac
    TORCH_ARGS=("torch==$TORCH_VERSION+$build")
    local url="${index%/}/$build"
    if "$python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' \
            "$url/torch/" >/dev/null 2>&1; then
        TORCH_ARGS+=(--extra-index-url "$url")
    else
        echo "setup: PyTorch's index $url cannot be reached from here; torch==$TORCH_VERSION+$build" \
             "must come from pip's own sources" >&2
    fi
}
