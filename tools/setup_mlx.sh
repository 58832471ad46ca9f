#!/usr/bin/env bash
# Sets up the MLX backend on Linux and builds its plugin library where plugins.toml finds it.
#
#   tools/setup_mlx.sh                 # install, prepare, build target/release/libinfer_plugin_mlx.so
#   tools/setup_mlx.sh cargo ARGS...   # any cargo command on the MLX workspace (backends/mlx),
#                                      # e.g. `tools/setup_mlx.sh cargo test -p infer-backend-mlx`
#
# Idempotent, run from anywhere in the repo; a second run only rebuilds what changed.
#   1. A venv (${INFER_VENV_DIR:-~/.cache/infer/venvs}/mlx) with, from PyPI: mlx-cpu (MLX's CPU
#      build: libmlx.so, headers, CMake package), cmake (mlx-c's build) and libclang (mlx-sys's
#      bindgen). The machine needs nothing else but gcc/g++. The wheel's reference BLAS is then
#      pointed at Debian's OpenBLAS, installed if missing and possible (INFER_MLX_BLAS=reference:
#      keep the wheel's).
#   2. mlx-sys 0.7.0 and mlx-rs 0.33.0 from crates.io (`cargo vendor`), with the patches in
#      backends/mlx/patches/ applied, under ${INFER_CACHE_DIR:-~/.cache/infer}/mlx/crates.
#      cargo uses them through `--config patch.crates-io...` (see backends/mlx/Cargo.toml).
#   3. `cargo build --release -p infer-plugin-mlx`, then the library is copied to
#      <repo>/target/release/ when cargo's target dir is elsewhere (plugins.toml looks there).
# Progress goes to stderr. macOS needs none of this: docs/backends/mlx.md.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"

MLX_VERSION="0.32.2"   # the MLX that mlx-c 0.7.0 (inside mlx-sys 0.7.0) is written against
CMAKE_VERSION="4.4.4"
LIBCLANG_VERSION="18.1.1"
MLX_SYS_VERSION="0.7.0"
MLX_RS_VERSION="0.33.0"
PYTHON="${PYTHON:-python3}"
VENV="${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}/mlx"
CACHE="${INFER_CACHE_DIR:-$HOME/.cache/infer}/mlx"
CRATES="$CACHE/crates"
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { echo "setup_mlx: $*" >&2; }

if [ "$(uname -s)" = "Darwin" ]; then
    log "on macOS build with the stock crates instead: cargo build --release --manifest-path backends/mlx/Cargo.toml -p infer-plugin-mlx (docs/backends/mlx.md)"
    exit 1
fi

site_packages() {
    local d
    for d in "$VENV"/lib/python3.*/site-packages; do
        [ -d "$d" ] && { echo "$d"; return 0; }
    done
    return 1
}

# 1. The venv. A stamp names the pinned versions, so a pin change reinstalls.
install_venv() {
    local stamp="$VENV/.infer-mlx-stamp" want="mlx-cpu==$MLX_VERSION cmake==$CMAKE_VERSION libclang==$LIBCLANG_VERSION"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating venv $VENV"
        mkdir -p "$(dirname "$VENV")"
        "$PYTHON" -m venv "$VENV"
    fi
    log "installing $want"
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pip install --quiet $want
    echo "$want" > "$stamp"
}

# 2. The patched crates. Each is re-made only when its patch changes (a stamp holds the patch's
# hash), so cargo sees unchanged sources and does not rebuild mlx-c.
prepare_crates() {
    local need=0 name version patch stamp
    for spec in "mlx-sys $MLX_SYS_VERSION installed-mlx" "mlx-rs $MLX_RS_VERSION non-apple-seed"; do
        read -r name version patch <<< "$spec"
        patch="$REPO/backends/mlx/patches/$name-$version-$patch.patch"
        stamp="$CRATES/$name-$version/.infer-patch"
        [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(sha256sum < "$patch")" ] || need=1
    done
    [ "$need" = 0 ] && return 0

    local tmp
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' RETURN
    log "fetching mlx-sys $MLX_SYS_VERSION and mlx-rs $MLX_RS_VERSION from crates.io"
    mkdir -p "$tmp/fetch/src"
    cat > "$tmp/fetch/Cargo.toml" <<EOF
[package]
name = "fetch-mlx-crates"
version = "0.0.0"
edition = "2021"
[dependencies]
mlx-sys = { version = "=$MLX_SYS_VERSION", default-features = false }
mlx-rs = { version = "=$MLX_RS_VERSION", default-features = false }
EOF
    touch "$tmp/fetch/src/lib.rs"
    (cd "$tmp/fetch" && cargo vendor --quiet --versioned-dirs "$tmp/vendor" > /dev/null)
    mkdir -p "$CRATES"
    for spec in "mlx-sys $MLX_SYS_VERSION installed-mlx" "mlx-rs $MLX_RS_VERSION non-apple-seed"; do
        read -r name version patch <<< "$spec"
        patch="$REPO/backends/mlx/patches/$name-$version-$patch.patch"
        stamp="$CRATES/$name-$version/.infer-patch"
        [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(sha256sum < "$patch")" ] && continue
        log "applying $(basename "$patch")"
        rm -f "$tmp/vendor/$name-$version/.cargo-checksum.json"
        (cd "$tmp/vendor/$name-$version" && git apply "$patch")
        rm -rf "$CRATES/$name-$version"
        mv "$tmp/vendor/$name-$version" "$CRATES/$name-$version"
        sha256sum < "$patch" > "$CRATES/$name-$version/.infer-patch"
    done
}

# cargo on the MLX workspace with the patched crates and the build environment. The --config
# flags follow the subcommand: cargo does not pass flags placed before it to external subcommands
# (clippy would build the unpatched crates from crates.io). The libclang
# wheel has no compiler headers of its own (float.h, stddef.h): bindgen gets GCC's.
mlx_cargo() {
    local sp
    sp="$(site_packages)" || { log "no site-packages in $VENV"; exit 1; }
    MLX_DIR="$sp/mlx/share/cmake/MLX" \
    LIBCLANG_PATH="$sp/clang/native" \
    BINDGEN_EXTRA_CLANG_ARGS="-isystem $(gcc -print-file-name=include)" \
    PATH="$VENV/bin:$PATH" \
    cargo "$1" \
        --config "patch.crates-io.mlx-sys.path=\"$CRATES/mlx-sys-$MLX_SYS_VERSION\"" \
        --config "patch.crates-io.mlx-rs.path=\"$CRATES/mlx-rs-$MLX_RS_VERSION\"" \
        --manifest-path "$REPO/backends/mlx/Cargo.toml" "${@:2}"
}

# 1b. The BLAS. The mlx-cpu wheel bundles netlib's reference BLAS (plain loops, one thread), where
# a real model spends 83% of MLX's CPU time (docs/benchmarks.md). OpenBLAS has the same ABI
# (Debian ships it as an alternative for libblas.so.3), so the wheel's copy is replaced by a link
# to OpenBLAS when it is installed or installable (root with apt-get: libopenblas0-pthread); the
# wheel's own file stays beside it as *.reference, and INFER_MLX_BLAS=reference links that back.
# Nothing is rebuilt: libmlx finds the BLAS by file name at load time.
link_blas() {
    local libs bundled want openblas
    libs="$(site_packages)/mlx_cpu.libs"
    bundled="$(find "$libs" -maxdepth 1 -name 'libblas-*.so.*' ! -name '*.reference' 2>/dev/null | head -1)"
    [ -n "$bundled" ] || { log "no bundled BLAS under $libs: MLX's BLAS left as it is"; return 0; }
    [ -L "$bundled" ] || mv -f "$bundled" "$bundled.reference"
    want="$(basename "$bundled").reference"
    if [ "${INFER_MLX_BLAS:-openblas}" != reference ]; then
        openblas="/usr/lib/$(gcc -print-multiarch)/openblas-pthread/libblas.so.3"
        if [ ! -e "$openblas" ] && [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
            log "installing OpenBLAS (apt-get install libopenblas0-pthread)"
            { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas0-pthread \
                || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas0-pthread; }
            } > /dev/null 2>&1 || true
        fi
        if [ -e "$openblas" ]; then
            want="$openblas"
        else
            log "no OpenBLAS ($openblas): MLX keeps the wheel's reference BLAS (correct, slow)"
        fi
    fi
    [ "$(readlink "$bundled")" = "$want" ] || { ln -sfn "$want" "$bundled"; log "MLX's BLAS: $want"; }
}

install_venv
link_blas
prepare_crates

if [ "${1:-}" = "cargo" ]; then
    shift
    [ $# -gt 0 ] || { log "usage: tools/setup_mlx.sh cargo <command> [args...]"; exit 2; }
    mlx_cargo "$@"
    exit
fi

log "building the plugin library (release)"
mlx_cargo build --release -p infer-plugin-mlx
target="${CARGO_TARGET_DIR:-$REPO/backends/mlx/target}"
lib="$target/release/libinfer_plugin_mlx.so"
dest="$REPO/target/release/libinfer_plugin_mlx.so"
if [ "$(realpath -m "$lib")" != "$(realpath -m "$dest")" ]; then
    mkdir -p "$(dirname "$dest")"
    cp -f "$lib" "$dest.tmp" && mv -f "$dest.tmp" "$dest"
fi
log "MLX plugin library ready: $dest"
