#!/usr/bin/env bash
# Creates (idempotently) the venv holding the official `openai` Python client 3.51.0, which the
# server's end-to-end tests (cli/tests/serve.rs, serve_faults.rs) drive `infer serve` with, and the
# httpx it is built on, plus the `jsonschema` validator the structured-output test checks
# generated objects with. Prints the venv's python.
#
#   tools/serve/setup_openai_venv.sh   # -> ${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}/openai
set -euo pipefail

VERSION=3.51.0
JSONSCHEMA=4.25.1
PYTHON="${PYTHON:-python3}"
VENV="${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}/openai"
export PIP_DISABLE_PIP_VERSION_CHECK=1

if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('openai') != '$VERSION' or m.version('jsonschema') != '$JSONSCHEMA')" 2>/dev/null; then
    mkdir -p "$(dirname "$VENV")"
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet "openai==$VERSION" "jsonschema==$JSONSCHEMA" >&2
fi
echo "$VENV/bin/python"
