#!/usr/bin/env bash
# The peer for tools/bench/serve.sh: llama-cpp-python 0.3.36 with its OpenAI-compatible server
# (`python -m llama_cpp.server`), built from the PyPI source package (~12 minutes on 2 cores).
# The vector ISA comes from this CPU's flags (tools/fixtures/llamacpp_isa.sh). pip's cmake and
# ninja wheels supply the build tools.
#
#   tools/serve/setup_llamacpp_server_venv.sh   # -> ${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}/llama-cpp
set -euo pipefail

VERSION=0.3.36
PYTHON="${PYTHON:-python3}"
VENV="${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}/llama-cpp"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# shellcheck source=tools/fixtures/llamacpp_isa.sh
source "$(dirname "${BASH_SOURCE[0]}")/../fixtures/llamacpp_isa.sh"
export CMAKE_ARGS="${CMAKE_ARGS:-$(llamacpp_cmake_args)}"

if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys, llama_cpp.server.app; sys.exit(m.version('llama_cpp_python') != '$VERSION')" 2>/dev/null; then
    mkdir -p "$(dirname "$VENV")"
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet cmake ninja >&2
    "$VENV/bin/python" -m pip install --quiet "llama-cpp-python[server]==$VERSION" >&2
fi
echo "$VENV/bin/python"
