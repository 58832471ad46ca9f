#!/usr/bin/env bash
# Creates (idempotently) the venv holding the official `openai` Python client 3.51.0, which the
# server's end-to-end tests (cli/tests/serve.rs, serve_faults.rs, serve_agents.rs) drive
# `infer serve` with, and the httpx it is built on, plus the OpenAI Agents SDK (`openai-agents`,
# built on that same client) that serve_agents.rs runs a tool-calling agent with, and the
# `jsonschema` validator serve_structured.rs checks generated objects with. Prints the venv's
# python. Every package is pinned; pip runs only when one of them is missing or differs.
#
#   tools/serve/setup_openai_venv.sh   # -> ${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}/openai
set -euo pipefail

PINS=(openai==3.51.0 openai-agents==0.24.0 jsonschema==4.25.1)
PYTHON="${PYTHON:-python3}"
VENV="${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}/openai"
export PIP_DISABLE_PIP_VERSION_CHECK=1

if ! "$VENV/bin/python" - "${PINS[@]}" <<'PY' 2>/dev/null; then
import importlib.metadata as m, sys
sys.exit(any(m.version(name) != version for name, version in (p.split("==") for p in sys.argv[1:])))
PY
    mkdir -p "$(dirname "$VENV")"
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet "${PINS[@]}" >&2
fi
echo "$VENV/bin/python"
