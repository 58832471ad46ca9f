#!/usr/bin/env bash
# The three backends side by side on the same checkpoints, in one run: candle (built in), tch
# (libtorch, plugin library) and MLX (its CPU build here, plugin library), each through
# `infer bench`, plus what the MLX lazy graph costs (ops per step, graph building against
# evaluation, from INFER_MLX_PROFILE=1) and, when perf is installed, where MLX spends its time.
# Writes a result directory and prints markdown tables (docs/benchmarks.md has the numbers).
#
#   tools/bench/backends.sh [--no-build] [gemma] [qwen3-tiny] [qwen3-bf16]   # default: gemma qwen3-tiny
#
# Checkpoints:
#   gemma       Gemma 3 270M Q4_K_M GGUF (tools/models/fetch.sh), f32 compute: candle runs its GGML
#               kernels, tch and MLX dequantize to f32 at load. Memory-bound decode.
#   qwen3-tiny  tests/fixtures/qwen3/gqa (transformers' safetensors, 2 layers, hidden 64), f32:
#               almost no arithmetic, so it measures each backend's fixed cost per op and step.
#   qwen3-bf16  ~/.cache/infer/models/qwen3-0.6b-random (tools/bench/make_qwen3_bench.py), bf16.
# Environment knobs (defaults in brackets):
#   PROMPT_TOKENS [32]  GEN_TOKENS [16]  RUNS [2]  (medians of RUNS timed runs after one warm-up)
#   THREADS [1]: threads for candle (rayon), tch (OpenMP) and MLX's OpenBLAS (MLX's own CPU
#     stream computes on one thread)
#   BACKENDS ["candle tch mlx mlx-reference-blas"]: mlx runs on the BLAS tools/setup_mlx.sh linked
#     (OpenBLAS where it could); mlx-reference-blas is the same MLX library with the reference BLAS
#     the mlx-cpu wheel bundles preloaded (LD_PRELOAD): how much of MLX's CPU time is its BLAS.
#     Skipped when the setup kept no *.reference copy (it then runs on the reference BLAS anyway).
#   IDLE_QUIET_S [30] IDLE_MAX_WAIT_S [600]: before measuring, wait until no rustc/cargo/cc1plus/
#     clippy-driver process has run for IDLE_QUIET_S seconds in a row, at most IDLE_MAX_WAIT_S
#   PERF [1]: record a perf profile of MLX on each checkpoint (skipped without perf)
#   BENCH_OUT [/tmp/infer-backends-<timestamp>]  result directory
#   PROFILE [release]: the cargo profile of `infer` and the tch library (debug = the dev profile,
#     opt-level 3 for candle, infer-core and every dependency, 1 for the other workspace crates);
#     the MLX library is always the release one of tools/setup_mlx.sh
#
# Build (unless --no-build; never during measurement): `infer` and the tch plugin library
# (LIBTORCH from tools/setup_libtorch.sh) into ${CARGO_TARGET_DIR:-target}, and the MLX plugin
# library by tools/setup_mlx.sh. All three are copied into the result directory with a
# plugins.toml naming the copies, so other sessions rebuilding target/ cannot change what is
# measured.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODELS_DIR="${INFER_MODELS_DIR:-$HOME/.cache/infer/models}"
PROMPT_TOKENS="${PROMPT_TOKENS:-32}"
GEN_TOKENS="${GEN_TOKENS:-16}"
RUNS="${RUNS:-2}"
THREADS="${THREADS:-1}"
BACKENDS="${BACKENDS:-candle tch mlx mlx-reference-blas}"
MLX_LIBS="$(ls -d "${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}"/mlx/lib/python3.*/site-packages/mlx_cpu.libs 2>/dev/null | head -1)"
MLX_BLAS="$(find "$MLX_LIBS" -maxdepth 1 -name 'libblas-*.so.*' ! -name '*.reference' 2>/dev/null | head -1)"
REFERENCE_BLAS="$(find "$MLX_LIBS" -maxdepth 1 -name 'libblas-*.so.*.reference' 2>/dev/null | head -1)"
if [[ " $BACKENDS " == *" mlx-reference-blas "* ]] && [ -z "$REFERENCE_BLAS" ]; then
  echo "no reference BLAS kept beside $MLX_BLAS: leaving out mlx-reference-blas" >&2
  BACKENDS="${BACKENDS/mlx-reference-blas/}"
fi
IDLE_QUIET_S="${IDLE_QUIET_S:-30}"
IDLE_MAX_WAIT_S="${IDLE_MAX_WAIT_S:-600}"
PERF="${PERF:-1}"
OUT="${BENCH_OUT:-/tmp/infer-backends-$(date +%Y%m%d-%H%M%S)}"
TARGET="${CARGO_TARGET_DIR:-$REPO/target}"
PROFILE="${PROFILE:-release}"

build=1
keys=()
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    gemma|qwen3-tiny|qwen3-bf16) keys+=("$a") ;;
    *) echo "usage: $0 [--no-build] [gemma] [qwen3-tiny] [qwen3-bf16]" >&2; exit 2 ;;
  esac
done
[ ${#keys[@]} -gt 0 ] || keys=(gemma qwen3-tiny)
declare -A PATHS=([gemma]="$MODELS_DIR/gemma-3-270m-q4_k_m.gguf" [qwen3-tiny]="$REPO/tests/fixtures/qwen3/gqa"
                  [qwen3-bf16]="$MODELS_DIR/qwen3-0.6b-random")
declare -A DTYPE=([gemma]=f32 [qwen3-tiny]=f32 [qwen3-bf16]=bf16)
declare -A HOWTO=([gemma]="tools/models/fetch.sh" [qwen3-tiny]="git checkout tests/fixtures"
                  [qwen3-bf16]="tools/bench/make_qwen3_bench.py")
for k in "${keys[@]}"; do
  [ -e "${PATHS[$k]}" ] || { echo "missing ${PATHS[$k]}: run ${HOWTO[$k]}" >&2; exit 1; }
done

# shellcheck source=idle.sh
source "$REPO/tools/bench/idle.sh"

mkdir -p "$OUT"
echo "results -> $OUT" >&2
if [ "$build" = 1 ]; then
  echo "building infer and the tch plugin library (release), then the MLX one..." >&2
  LIBTORCH="$("$REPO/tools/setup_libtorch.sh")"
  (cd "$REPO" && LIBTORCH="$LIBTORCH" cargo build --profile "$([ "$PROFILE" = debug ] && echo dev || echo "$PROFILE")" \
    -p infer-cli -p infer-plugin-tch) >&2
  "$REPO/tools/setup_mlx.sh" >&2
fi
cp "$TARGET/$PROFILE/infer" "$OUT/infer"
cp "$TARGET/$PROFILE/libinfer_plugin_tch.so" "$OUT/"
cp "$REPO/target/release/libinfer_plugin_mlx.so" "$OUT/"
cat > "$OUT/plugins.toml" <<EOF
[[plugin]]
path = "libinfer_plugin_tch.so"
backends = ["tch"]
[[plugin]]
path = "libinfer_plugin_mlx.so"
backends = ["mlx"]
EOF
commit="$(cd "$REPO" && git rev-parse --short HEAD)$(cd "$REPO" && git diff --quiet HEAD 2>/dev/null || echo '+dirty')"
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
mlx_version="$(ls -d "${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}"/mlx/lib/python3.*/site-packages/mlx_cpu-*.dist-info 2>/dev/null \
  | sed 's/.*mlx_cpu-\(.*\)\.dist-info/\1/' | head -1)"
cat > "$OUT/machine.json" <<EOF
{"cpu": "$cpu", "cores": $(nproc), "commit": "$commit", "profile": "$PROFILE", "date": "$(date -u +%FT%TZ)", "mlx_cpu": "$mlx_version", "mlx_blas": "$(readlink -f "$MLX_BLAS")",
 "threads": $THREADS, "prompt_tokens": $PROMPT_TOKENS, "gen_tokens": $GEN_TOKENS, "runs": $RUNS}
EOF

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
waited=0 quiet=0
while [ "$quiet" -lt "$IDLE_QUIET_S" ] && [ "$waited" -lt "$IDLE_MAX_WAIT_S" ]; do
  if busy; then quiet=0; else quiet=$((quiet + 1)); fi
  sleep 1
  waited=$((waited + 1))
done
idle=false
[ "$quiet" -ge "$IDLE_QUIET_S" ] && idle=true
note="waited ${waited} s for ${IDLE_QUIET_S} s without rustc/cargo/cc1plus/clippy-driver; load avg $load_before -> $(cut -d' ' -f1-3 /proc/loadavg)"
echo "{\"idle\": $idle, \"note\": \"$note\"}" > "$OUT/idle.json"
echo "idle: $idle ($note)" >&2

# measure NAME CMD...: stdout -> NAME.out, stderr -> NAME.err, with a once-a-second sampler of
# compiler processes (NAME.contention) and the load average before and after (NAME.loadavg).
measure() {
  local name="$1"; shift
  : > "$OUT/$name.contention"
  ( while :; do if busy; then echo 1; else echo 0; fi; sleep 1; done >> "$OUT/$name.contention" ) &
  local sampler=$! la0 rc=0
  la0="$(cut -d' ' -f1 /proc/loadavg)"
  (cd "$OUT" && env INFER_CONFIG="$OUT/plugins.toml" RAYON_NUM_THREADS="$THREADS" CANDLE_NUM_THREADS="$THREADS" \
    INFER_TCH_THREADS="$THREADS" OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" "$@") > "$OUT/$name.out" 2> "$OUT/$name.err" || rc=$?
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
  echo "$la0 $(cut -d' ' -f1 /proc/loadavg)" > "$OUT/$name.loadavg"
  [ "$rc" = 0 ] || { echo "$name failed (rc $rc):" >&2; tail -5 "$OUT/$name.err" >&2; exit 1; }
}

bench_args() { # KEY
  echo --model "${PATHS[$1]}" --dtype "${DTYPE[$1]}" --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS"
}

for k in "${keys[@]}"; do
  for b in $BACKENDS; do
    echo "$k: $b..." >&2
    if [ "$b" = mlx-reference-blas ]; then
      # shellcheck disable=SC2046
      measure "bench-$k-$b" env LD_PRELOAD="$REFERENCE_BLAS" "$OUT/infer" bench \
        --backend mlx $(bench_args "$k") --runs "$RUNS" --json
    else
      # shellcheck disable=SC2046
      measure "bench-$k-$b" "$OUT/infer" bench --backend "$b" $(bench_args "$k") --runs "$RUNS" --json
    fi
  done
  if [[ " $BACKENDS " == *" mlx "* ]]; then
    # The lazy graph's cost: one line per evaluation (ops added since the last one, the time spent
    # adding them through the plugin boundary, the time evaluating). A separate run: the
    # profile's clock reads are not in the timed runs above.
    echo "$k: mlx, graph profile..." >&2
    # shellcheck disable=SC2046
    measure "graph-$k" env INFER_MLX_PROFILE=1 "$OUT/infer" bench --backend mlx $(bench_args "$k") --runs 1 --json
  fi
done

if [ "$PERF" = 1 ] && [[ " $BACKENDS " == *" mlx "* ]] && command -v perf >/dev/null; then
  for k in "${keys[@]}"; do
    for b in mlx mlx-reference-blas; do
      [[ " $BACKENDS " == *" $b "* ]] || continue
      preload=()
      [ "$b" = mlx-reference-blas ] && preload=(LD_PRELOAD="$REFERENCE_BLAS")
      echo "$k: $b under perf..." >&2
      # shellcheck disable=SC2046
      measure "perf-$k-$b" env "${preload[@]}" perf record -g -o "$OUT/perf-$k-$b.data" "$OUT/infer" bench \
        --backend mlx $(bench_args "$k") --runs 1 --json
      perf report -i "$OUT/perf-$k-$b.data" --no-children --sort dso --stdio -g none 2> /dev/null | grep -v '^#' \
        | grep -v '^$' | head -8 > "$OUT/perf-$k-$b.dso.txt" || true
      perf report -i "$OUT/perf-$k-$b.data" --no-children --sort dso,sym --stdio -g none 2> /dev/null \
        | grep -v '^#' | grep -v '^$' | head -15 | cut -c1-110 > "$OUT/perf-$k-$b.sym.txt" || true
    done
  done
fi

python3 "$REPO/tools/bench/backends_report.py" "$OUT" | tee "$OUT/report.md"
