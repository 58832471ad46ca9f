#!/usr/bin/env bash
# The tch backend's CUDA checks, for a machine with an NVIDIA GPU (docs/backends/tch.md, "CUDA").
#
#   tools/gpu_check.sh            build against a CUDA libtorch, then run the checks (needs cargo)
#   tools/gpu_check.sh bundle F   build, then pack the binaries the checks run into F (.tar.xz)
#   tools/gpu_check.sh run F      unpack F (built on another machine) and run the checks: for a GPU
#                                 machine without a Rust toolchain
#
# The checks:
#   1. the op conformance suite with tch on the GPU against candle on the CPU
#      (backends/tch/tests/ops.rs, INFER_TCH_TEST_DEVICE=cuda);
#   2. every model test (LLM, Qwen3-TTS, Voxtral TTS and Realtime) through `--backend cuda`
#      (tests/src/lib.rs Setup::TchCuda, INFER_TEST_CUDA=1 INFER_SETUPS=cuda);
#   3. `infer run --backend cuda` against the LLM goldens (cli/tests/tch.rs);
#   4. unless INFER_GPU_BENCH=0: prefill / decode of a random-weight bf16 Qwen3-0.6B-shape
#      checkpoint (tools/bench/make_qwen3_bench.py) on the GPU, `infer bench` beside
#      tools/bench/transformers_bench.py, at 128 and 2048 prompt tokens.
# Everything goes to stdout (tee it to keep a log); "gpu_check: failed:" names the failed tests.
#
# LIBTORCH: a libtorch with CUDA (default: INFER_LIBTORCH_FULL=1 tools/setup_libtorch.sh). For
# `bundle`, the GPU machine's own libtorch version is what to build against (its torch wheel's
# `torch` folder; LIBTORCH_BYPASS_VERSION_CHECK=1 where it is not the version tch pins): `run`
# links the build's libtorch path to that machine's torch when the path is missing there.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/infer/target-cuda}"
TESTS=(llm_parity generation packed_batch qwen3_tts_talker qwen3_tts_speech qwen3_tts_codec
    qwen3_tts_speaker voxtral_tts_stages voxtral_tts_speech voxtral_realtime)

build() {
    if [ -z "${LIBTORCH:-}" ]; then
        LIBTORCH=$(INFER_LIBTORCH_FULL=1 tools/setup_libtorch.sh)
    fi
    export LIBTORCH
    mkdir -p "$CARGO_TARGET_DIR"
    # Building where the CUDA runtime libraries are absent (only the GPU machine has them):
    # libtorch_cuda is force-linked anyway, and its own undefined symbols are left to the
    # dynamic loader there.
    # (grep reads all of ldd's output: with -q its early exit fails the pipe under pipefail)
    if ldd "$LIBTORCH/lib/libtorch_cuda.so" | grep "not found" > /dev/null; then
        export INFER_TCH_CUDA=1
        export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C link-arg=-Wl,--allow-shlib-undefined"
    fi
    PATCH=()
    if [ "${LIBTORCH_BYPASS_VERSION_CHECK:-}" = 1 ]; then
        # Another libtorch than the one tch pins (the GPU machine's own torch): the torch-sys
        # wrapper functions it cannot compile are stubbed in a copy of the crate, which cargo
        # uses through `patch.crates-io` (Cargo.lock is restored afterwards).
        local src dir torch_version
        src=$(cargo metadata --format-version 1 | python3 -c '
import json, sys
print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "torch-sys"))')
        torch_version=$(python3 -c 'import re, sys; print(re.search(r"__version__ = .(\S+?).$", open(sys.argv[1]).read(), re.M)[1])' \
            "$LIBTORCH/version.py" 2>/dev/null || echo unknown)
        # One patched copy per torch-sys and libtorch version (the stubs depend on both).
        dir=$CARGO_TARGET_DIR/$(basename "$(dirname "$src")")-patched-for-$torch_version
        [ -d "$dir" ] || cp -r "$(dirname "$src")" "$dir"
        # Cargo.lock as committed comes back at exit (a backup left by a killed run is not reused).
        git show HEAD:Cargo.lock > "$CARGO_TARGET_DIR/Cargo.lock.orig"
        trap 'cp "$CARGO_TARGET_DIR/Cargo.lock.orig" "$REPO/Cargo.lock"' EXIT
        PATCH=(--config "patch.crates-io.torch-sys.path=\"$dir\"")
        local try
        for try in 1 2 3 4; do
            if cargo build --release --workspace ${PATCH[@]+"${PATCH[@]}"} 2>&1 | tee "$CARGO_TARGET_DIR/gpu-build.log"; then
                break
            fi
            python3 tools/gpu/patch_torch_sys.py "$dir" "$CARGO_TARGET_DIR/gpu-build.log"
        done
    fi
    cargo build --release --workspace ${PATCH[@]+"${PATCH[@]}"}
    local args=(test --release --no-run --message-format=json ${PATCH[@]+"${PATCH[@]}"} -p infer-backend-tch --test ops
        -p infer-cli --test tch -p infer-tests)
    for t in "${TESTS[@]}"; do args+=(--test "$t"); done
    cargo "${args[@]}" | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])
' > "$CARGO_TARGET_DIR/gpu-tests.txt"
    echo "$LIBTORCH" > "$CARGO_TARGET_DIR/gpu-libtorch.txt"
    cp "$LIBTORCH/version.py" "$CARGO_TARGET_DIR/gpu-libtorch-version.py" 2>/dev/null || true
}

# Runs one test binary: $1 its target name, then environment assignments and (starting with
# --) arguments for the test binary.
run_test() {
    local name=$1 exe a envs=() args=()
    shift
    for a in "$@"; do
        case "$a" in --*) args+=("$a") ;; *) envs+=("$a") ;; esac
    done
    exe=$(awk -v n="$name" '$1 == n { print $2 }' "$CARGO_TARGET_DIR/gpu-tests.txt")
    echo "== $name ($*)"
    # The tests find tests/fixtures from CARGO_MANIFEST_DIR: this checkout, wherever it is.
    if env CARGO_MANIFEST_DIR="$REPO/tests" "${envs[@]}" "$exe" "${args[@]}" 2>&1; then
        PASSED+=("$name")
    else
        FAILED+=("$name")
    fi
}

checks() {
    local libtorch
    libtorch=$(cat "$CARGO_TARGET_DIR/gpu-libtorch.txt")
    if [ ! -e "$libtorch/lib" ]; then
        local torch
        torch=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
        echo "gpu_check: linking $libtorch to this machine's torch ($torch)"
        local built have
        built=$(python3 -c 'import runpy, sys; print(runpy.run_path(sys.argv[1])["__version__"])' \
            "$CARGO_TARGET_DIR/gpu-libtorch-version.py" 2>/dev/null || echo unknown)
        have=$(python3 -c 'import torch; print(torch.__version__)')
        if [ "$built" != "$have" ]; then
            echo "gpu_check: built against torch $built, this machine has $have: the binaries may not load" >&2
        fi
        mkdir -p "$(dirname "$libtorch")"
        ln -sfn "$torch" "$libtorch"
    fi
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    PASSED=()
    FAILED=()
    # --include-ignored: the CUDA-against-CPU op check, ignored on machines without a GPU.
    run_test ops INFER_TCH_TEST_DEVICE=cuda --include-ignored
    run_test tch INFER_TEST_CUDA=1
    for t in "${TESTS[@]}"; do run_test "$t" INFER_TEST_CUDA=1 INFER_SETUPS=cuda; done
    echo "gpu_check: passed: ${PASSED[*]:-none}"
    echo "gpu_check: failed: ${FAILED[*]:-none}"
    if [ "${INFER_GPU_BENCH:-1}" = 1 ]; then bench; fi
    [ ${#FAILED[@]} = 0 ]
}

bench() {
    local model=${INFER_GPU_BENCH_MODEL:-/tmp/qwen3-0.6b-random} infer=$CARGO_TARGET_DIR/release/infer
    local config=/tmp/gpu_check_plugins.toml
    printf '[[plugin]]\npath = "%s"\n' "$CARGO_TARGET_DIR/release/libinfer_plugin_tch.so" > "$config"
    # Made only where nothing is (make_qwen3_bench.py replaces the folder it writes).
    [ -e "$model" ] || INFER_BENCH_ANY_VERSION=1 python3 tools/bench/make_qwen3_bench.py "$model"
    for n in 128 2048; do
        echo "== bench: $n prompt tokens, 64 generated, bf16, cuda"
        INFER_CONFIG=$config "$infer" bench --model "$model" --backend cuda --dtype bf16 \
            --prompt-tokens $n --gen-tokens 64 --runs 3 --json || true
        python3 tools/bench/transformers_bench.py "$model" --device cuda --dtype bf16 \
            --prompt-tokens $n --gen-tokens 64 --runs 3 || true
    done
}

case "${1:-}" in
    "") build; checks ;;
    bundle)
        out=$(realpath -m "${2:?bundle wants an output file}")
        mkdir -p "$(dirname "$out")"
        build
        stage=$(mktemp -d)
        # (replaces build's trap: restore Cargo.lock too where build patched it)
        trap 'rm -rf "$stage"; if [ ${#PATCH[@]} -gt 0 ]; then cp "$CARGO_TARGET_DIR/Cargo.lock.orig" "$REPO/Cargo.lock"; fi' EXIT
        # The same absolute paths on the GPU machine: the CLI test runs the `infer` path compiled
        # into it and finds the plugin libraries beside its own binary.
        mkdir -p "$stage$CARGO_TARGET_DIR/release/deps"
        for f in infer libinfer_plugin_tch.so libinfer_plugin_llm.so libinfer_plugin_qwen3_tts.so \
            libinfer_plugin_voxtral_tts.so libinfer_plugin_voxtral_realtime.so; do
            strip -s -o "$stage$CARGO_TARGET_DIR/release/$f" "$CARGO_TARGET_DIR/release/$f"
        done
        while read -r _ exe; do strip -s -o "$stage$exe" "$exe"; done < "$CARGO_TARGET_DIR/gpu-tests.txt"
        cp "$CARGO_TARGET_DIR"/gpu-{tests.txt,libtorch.txt,libtorch-version.py} "$stage$CARGO_TARGET_DIR/"
        # ~240 MB of binaries that share most of their code: one xz stream with a dictionary
        # larger than the whole tar stores each shared part once (~17 MB; 65 MB per file).
        # Only the target dir's path goes in (no `.` entry: extracting that at / would set the
        # mode of / to the staging dir's 0700).
        tar -C "$stage" -cf - "${CARGO_TARGET_DIR#/}" | xz -T1 -9e --lzma2=dict=512MiB > "$out"
        echo "gpu_check: $out ($(du -h "$out" | cut -f1))"
        ;;
    run)
        bundle=${2:?run wants the bundle}
        # The build machine's target dir, where its binaries expect to be (their paths are
        # compiled in); existing directories on the way keep their modes.
        list=$(tar -tJf "$bundle" | grep '/gpu-tests.txt$')
        CARGO_TARGET_DIR=/$(dirname "$list")
        tar -C / --no-overwrite-dir -xJf "$bundle"
        checks
        ;;
    *) echo "usage: tools/gpu_check.sh [bundle FILE | run FILE]" >&2; exit 2 ;;
esac
