# Which build of torch the set-up installs; sourced by scripts/setup.sh and scripts/setup-dev.sh.
#
# ORCHESTRATE_TORCH picks it: `cpu` (the default, on any machine), a build of PyTorch's own wheel
# index by its tag (`cu128`, `cu126`, `rocm6.4`, `xpu`: a GPU machine sets the one its driver
# takes), or `pypi` (PyPI's wheel: on Linux x86_64 a multi-GB CUDA build). A tagged build is
# asked for by its local version (torch==2.13.0+cpu) with PyTorch's index for it as an extra
# index, so pip cannot fall back to another build. On macOS and on Linux for ARM, PyPI's wheel is
# the CPU build (PyTorch's CPU index has no +cpu one there), so `cpu` takes it. Where PyTorch's
# index cannot be reached (these project machines reach no host but the package index their pip
# is pointed at, whose local wheel folder holds the CPU build), pip's own sources must hold that
# build, or the install fails naming it. ORCHESTRATE_TORCH_INDEX points at a mirror of PyTorch's
# index (`none`: pip's own sources only).

TORCH_VERSION=2.13.0

# torch_install_args PYTHON: sets TORCH_ARGS, what pip (or uv) installs torch with, and
# TORCH_INDEX, PyTorch's index when it is one of them (else empty).
torch_install_args() {
    local python=$1 build=${ORCHESTRATE_TORCH:-cpu}
    local index=${ORCHESTRATE_TORCH_INDEX:-https://download.pytorch.org/whl}
    TORCH_INDEX=
    if ! [[ $build =~ ^(cpu|cu[0-9]{3}|rocm[0-9]+(\.[0-9]+)*|xpu|pypi)$ ]]; then
        echo "setup: ORCHESTRATE_TORCH=$build is not a torch build: use cpu (the default), a" \
             "build tag of PyTorch's index (cu128, cu126, rocm6.4, xpu) or pypi" >&2
        return 2
    fi
    if [ "$build" = cpu ]; then
        case "$(uname -s)/$(uname -m)" in
            Darwin/*|Linux/aarch64|Linux/arm64) build=pypi ;;
        esac
    fi
    if [ "$build" = pypi ]; then
        TORCH_ARGS=("torch==$TORCH_VERSION")
        return
    fi
    TORCH_ARGS=("torch==$TORCH_VERSION+$build")
    [ "$index" = none ] && return
    local url="${index%/}/$build"
    # One look, so that an index out of reach costs seconds once, not pip's five retries.
    if "$python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
            "$url/torch/" >/dev/null 2>&1; then
        TORCH_ARGS+=(--extra-index-url "$url")
        TORCH_INDEX=$url
    else
        echo "setup: PyTorch's index $url cannot be reached from here; torch==$TORCH_VERSION+$build" \
             "must come from pip's own sources" >&2
    fi
}

# What to say when torch did not install.
torch_failed() {
    echo "setup: ${TORCH_ARGS[0]} could not be installed. ORCHESTRATE_TORCH picks another build" \
         "(pypi: PyPI's wheel, a CUDA build on Linux x86_64); see scripts/torch.sh" >&2
    exit 1
}
