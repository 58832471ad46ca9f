#!/usr/bin/env bash
# Installs the libtorch the tch backend builds and runs against (PyTorch 2.13.0, what tch 0.26
# needs) from PyPI into a venv, the lean way, and prints the LIBTORCH path on stdout.
#
#   export LIBTORCH="$(tools/setup_libtorch.sh)"
#
# Idempotent: an existing venv with the right torch version is reused (no network then).
# Venv: ${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}/libtorch (~1.4 GB instead of the full
# 4.7 GB CUDA stack):
#   - torch==2.13.0 with --no-deps (PyPI only has the CUDA build; its libtorch_cuda.so is there
#     and is what a GPU machine uses),
#   - torch's pure-Python deps (so `import torch` would work for the CPU),
#   - nvidia-cuda-runtime and nvidia-cuda-cupti only: libtorch_cpu.so itself links
#     libcudart.so.13 and libcupti.so.13. On a GPU machine the remaining CUDA libraries (cuBLAS,
#     cuDNN, ...) come from INFER_LIBTORCH_FULL=1, which installs the full dependency set.
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail

TORCH_VERSION="2.13.0"
PYTHON="${PYTHON:-python3}"
VENV_ROOT="${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}"
VENV="$VENV_ROOT/libtorch"
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { echo "setup_libtorch: $*" >&2; }

torch_dir() {
    # The site-packages torch directory (python3.X varies with the interpreter).
    local d
    for d in "$VENV"/lib/python3.*/site-packages/torch; do
        [ -d "$d/lib" ] && { echo "$d"; return 0; }
    done
    return 1
}

installed_version() {
    local d
    for d in "$VENV"/lib/python3.*/site-packages/torch-*.dist-info; do
        [ -d "$d" ] && { basename "$d" | sed -e 's/^torch-//' -e 's/\.dist-info$//'; return 0; }
    done
    return 1
}

# The CUDA runtime libraries libtorch_cpu.so links (found through torch's own rpath to
# ../../nvidia/*/lib). Missing ones are the classic failure of a --no-deps install.
deps_present() {
    local t="$1" lib found
    [ -f "$t/lib/libtorch_cpu.so" ] || return 1
    for lib in libcudart.so.13 libcupti.so.13; do
        found=0
        for d in "$t"/../nvidia/cu13/lib "$t"/../nvidia/cuda_runtime/lib "$t"/../nvidia/cuda_cupti/lib; do
            [ -e "$d/$lib" ] && found=1
        done
        [ "$found" = 1 ] || return 1
    done
}

if t="$(torch_dir)" && [ "$(installed_version || true)" = "$TORCH_VERSION" ] && deps_present "$t"; then
    echo "$t"
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
    log "creating venv $VENV"
    mkdir -p "$VENV_ROOT"
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet)

if [ "${INFER_LIBTORCH_FULL:-0}" = "1" ]; then
    log "installing torch==$TORCH_VERSION with its full CUDA dependency set (~4.7 GB)"
    "${PIP[@]}" "torch==$TORCH_VERSION"
else
    log "installing torch==$TORCH_VERSION (no deps, ~1 GB download)"
    "${PIP[@]}" --no-deps "torch==$TORCH_VERSION"
    log "installing torch's pure-Python deps"
    "${PIP[@]}" --no-deps filelock typing-extensions sympy mpmath networkx jinja2 markupsafe fsspec "setuptools>=77.0.3"
    log "installing the CUDA runtime and CUPTI that libtorch_cpu.so links"
    "${PIP[@]}" --no-deps nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85
fi

t="$(torch_dir)" || { log "torch was installed but $VENV has no site-packages/torch/lib"; exit 1; }
if ! deps_present "$t"; then
    log "libcudart.so.13 / libcupti.so.13 not found under $t/../nvidia: the CUDA runtime wheels did not install"
    exit 1
fi
log "libtorch ready: $t"
echo "$t"
