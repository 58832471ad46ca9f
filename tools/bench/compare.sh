#!/usr/bin/env bash
# infer vs its peers, side by side, plus this box's memory-bandwidth floor: llama.cpp on the real
# GGUF checkpoints (gemma, qwen) and HF transformers (PyTorch CPU) on a bf16 safetensors checkpoint
# of Qwen3-0.6B's shape with random weights (qwen3-bf16). Writes a result directory and prints
# markdown tables (docs/benchmarks.md has the numbers).
#
#   tools/bench/compare.sh [--no-build] [gemma] [qwen] [qwen3-bf16]     # default: gemma qwen
#
# Needs: gcc, and per model subset
#   gemma, qwen: tools/models/fetch.sh (the GGUFs), tools/fixtures/setup_llamacpp_venv.sh
#     (llama-cpp-python 0.3.36);
#   qwen3-bf16: tools/fixtures/setup_venv.sh (transformers 5.23.0 / torch 2.13.0), then
#     tools/bench/make_qwen3_bench.py in that venv (the checkpoint, ~/.cache/infer/models/qwen3-0.6b-random);
#     infer runs it with --dtype bf16, transformers (tools/bench/transformers_bench.py) in bf16.
# Environment knobs (defaults in brackets):
#   PROMPT_TOKENS [128]  GEN_TOKENS [64]  RUNS [3]  (medians of RUNS timed runs after one warm-up)
#     PROMPT_TOKENS may list several lengths ("128 2048"): each is a row of its own, decode runs at
#     that depth (after the prompt). Both GGUFs allow 32768 positions.
#   INFER_KV_DTYPES [""]  infer's KV cache dtypes, one row each ("f32 f16"); empty: the compute
#     dtype (--dtype), infer's default.  LLAMA_KV_DTYPES [f16]  llama.cpp's (its default is f16).
#   LLAMACPP_VENV [$INFER_VENV_DIR/llamacpp]  the llama-cpp-python venv
#   INFER_THREADS ["2 1"]  LLAMA_THREADS ["2 1"]  TRANSFORMERS_THREADS ["2 1"]  thread counts
#   INFER_BIN [${CARGO_TARGET_DIR:-target}/release/infer]  the binary to measure (built by this
#     script unless --no-build; copied into the result directory either way)
#   IDLE_QUIET_S [30] IDLE_MAX_WAIT_S [600]: before measuring, wait until no rustc/cargo/cc1plus/
#     clippy-driver process has run for IDLE_QUIET_S seconds in a row, at most IDLE_MAX_WAIT_S
#     (then measure anyway and record that the box was not idle)
#   BENCH_OUT [/tmp/infer-bench-<timestamp>]  result directory
#   INFER_MODELS_DIR [~/.cache/infer/models]  INFER_VENV_DIR [~/.cache/infer/venvs]
#
# Steps: build target/release/infer (unless --no-build; never during measurement), copy it into the
# result directory (other sessions may rebuild target/ meanwhile), wait for idle, measure membw.c
# at 1 and 2 threads, then per model: the peer (llama.cpp or transformers) and infer at each thread
# count, each in a fresh process. During every measurement a sampler notes once a second whether a compiler process runs;
# "contended s" in the table is how many of those seconds were.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODELS_DIR="${INFER_MODELS_DIR:-$HOME/.cache/infer/models}"
VENV_DIR="${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}"
PROMPT_TOKENS="${PROMPT_TOKENS:-128}"
INFER_KV_DTYPES="${INFER_KV_DTYPES:-}"
LLAMA_KV_DTYPES="${LLAMA_KV_DTYPES:-f16}"
GEN_TOKENS="${GEN_TOKENS:-64}"
RUNS="${RUNS:-3}"
INFER_THREADS="${INFER_THREADS:-2 1}"
LLAMA_THREADS="${LLAMA_THREADS:-2 1}"
TRANSFORMERS_THREADS="${TRANSFORMERS_THREADS:-2 1}"
INFER_BIN="${INFER_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/infer}"
IDLE_QUIET_S="${IDLE_QUIET_S:-30}"
IDLE_MAX_WAIT_S="${IDLE_MAX_WAIT_S:-600}"
OUT="${BENCH_OUT:-/tmp/infer-bench-$(date +%Y%m%d-%H%M%S)}"
# Any process whose name contains one of these (cargo also matches cargo-clippy; a `cargo test`
# keeps its cargo process alive while the test binaries run).
# shellcheck source=idle.sh
source "$REPO/tools/bench/idle.sh"

build=1
keys=()
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    gemma|qwen|qwen3-bf16) keys+=("$a") ;;
    *) echo "usage: $0 [--no-build] [gemma] [qwen] [qwen3-bf16]" >&2; exit 2 ;;
  esac
done
[ ${#keys[@]} -gt 0 ] || keys=(gemma qwen)
# Per model: the checkpoint (a GGUF file or a safetensors folder), the peer implementation, infer's
# --dtype, and how to get the checkpoint.
declare -A FILES=([gemma]=gemma-3-270m-q4_k_m.gguf [qwen]=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
                  [qwen3-bf16]=qwen3-0.6b-random)
declare -A PEER=([gemma]=llama.cpp [qwen]=llama.cpp [qwen3-bf16]=transformers)
declare -A DTYPE=([gemma]=f32 [qwen]=f32 [qwen3-bf16]=bf16)
declare -A HOWTO=([gemma]="tools/models/fetch.sh" [qwen]="tools/models/fetch.sh"
                  [qwen3-bf16]="$VENV_DIR/transformers/bin/python tools/bench/make_qwen3_bench.py")
declare -A PEER_VENV=([llama.cpp]="${LLAMACPP_VENV:-$VENV_DIR/llamacpp}" [transformers]="$VENV_DIR/transformers")
declare -A PEER_SETUP=([llama.cpp]=tools/fixtures/setup_llamacpp_venv.sh [transformers]=tools/fixtures/setup_venv.sh)

for k in "${keys[@]}"; do
  [ -e "$MODELS_DIR/${FILES[$k]}" ] || { echo "missing $MODELS_DIR/${FILES[$k]}: run ${HOWTO[$k]}" >&2; exit 1; }
  v="${PEER_VENV[${PEER[$k]}]}"
  [ -x "$v/bin/python" ] || { echo "missing $v: run ${PEER_SETUP[${PEER[$k]}]}" >&2; exit 1; }
done
# Bytes of weights on disk: the GGUF file, or the folder's *.safetensors.
weight_bytes() {
  if [ -d "$1" ]; then cat "$1"/*.safetensors | wc -c; else stat -c %s "$1"; fi
}

mkdir -p "$OUT"
echo "results -> $OUT" >&2

if [ "$build" = 1 ]; then
  echo "building infer-cli (release)..." >&2
  (cd "$REPO" && cargo build --release -p infer-cli) >&2
fi
cp "$INFER_BIN" "$OUT/infer"
gcc -O3 -mavx2 -pthread -o "$OUT/membw" "$REPO/tools/bench/membw.c"

# Machine description.
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
cores="$(nproc)"
mem_gb="$(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo)"
commit="$(cd "$REPO" && git rev-parse --short HEAD)$(cd "$REPO" && git diff --quiet HEAD -- . 2>/dev/null || echo '+dirty')"
cat > "$OUT/machine.json" <<EOF
{"cpu": "$cpu", "cores": $cores, "mem_gib": $mem_gb, "kernel": "$(uname -r)", "commit": "$commit", "date": "$(date -u +%FT%TZ)", "infer_bin": "$INFER_BIN", "infer_bin_mtime": "$(date -u -r "$INFER_BIN" +%FT%TZ)"}
EOF
lscpu > "$OUT/lscpu.txt"

# Wait for an idle box: no compiler process for IDLE_QUIET_S consecutive seconds.
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
echo "{\"idle\": $idle, \"waited_s\": $waited, \"note\": \"$note\"}" > "$OUT/idle.json"
echo "idle: $idle ($note)" >&2

# measure NAME CMD...: runs CMD with a once-a-second contention sampler; stdout -> $OUT/NAME.json,
# the sampler's 0/1 marks -> $OUT/NAME.contention.
measure() {
  local name="$1"; shift
  local rc=0
  run_sampled "$name" "$@" || rc=$?
  echo "$LOADAVG_START $LOADAVG_END" > "$OUT/$name.loadavg"
  [ "$rc" = 0 ] || { echo "$name failed (rc $rc):" >&2; cat "$OUT/$name.stderr" >&2; exit 1; }
}

# record KEY IMPL THREADS NAME: appends one line to runs.jsonl (prompt_tokens and kv_dtype copied
# from the result, kv_dtype null where the implementation does not say).
record() {
  local key="$1" impl="$2" threads="$3" name="$4"
  python3 - "$OUT" "$key" "$impl" "$threads" "$name" "$(weight_bytes "$MODELS_DIR/${FILES[$key]}")" <<'PY'
import json, sys
out, key, impl, threads, name, size = sys.argv[1:]
marks = open(f"{out}/{name}.contention").read().split()
la = open(f"{out}/{name}.loadavg").read().split()
result = json.loads(open(f"{out}/{name}.json").read())
line = {"impl": impl, "model_key": key, "threads": int(threads), "file_bytes": int(size),
        "prompt_tokens": result["prompt_tokens"], "kv_dtype": result.get("kv_dtype"),
        "contended_s": marks.count("1"), "samples": len(marks),
        "loadavg_start": float(la[0]), "loadavg_end": float(la[1]),
        "result": result}
with open(f"{out}/runs.jsonl", "a") as f:
    f.write(json.dumps(line) + "\n")
PY
}

: > "$OUT/runs.jsonl"
echo "membw..." >&2
measure membw "$OUT/membw" 1 2

for k in "${keys[@]}"; do
  model="$MODELS_DIR/${FILES[$k]}"
  peer="${PEER[$k]}"
  py="${PEER_VENV[$peer]}/bin/python"
  if [ "$peer" = llama.cpp ]; then peer_threads="$LLAMA_THREADS"; else peer_threads="$TRANSFORMERS_THREADS"; fi
  for p in $PROMPT_TOKENS; do
    for t in $(printf '%s\n' $peer_threads $INFER_THREADS | sort -rnu); do
      if [[ " $peer_threads " == *" $t "* ]]; then
        if [ "$peer" = llama.cpp ]; then
          for kv in $LLAMA_KV_DTYPES; do
            echo "$k: $peer, $p prompt tokens, kv $kv, $t thread(s)..." >&2
            name="llamacpp-$k-p$p-kv$kv-t$t"
            measure "$name" "$py" "$REPO/tools/bench/llamacpp_bench.py" "$model" --threads "$t" \
              --prompt-tokens "$p" --gen-tokens "$GEN_TOKENS" --runs "$RUNS" --kv-dtype "$kv"
            record "$k" llama.cpp "$t" "$name"
          done
        else
          echo "$k: $peer, $p prompt tokens, $t thread(s)..." >&2
          name="transformers-$k-p$p-t$t"
          measure "$name" env OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" "$py" \
            "$REPO/tools/bench/transformers_bench.py" "$model" --dtype "${DTYPE[$k]}" --threads "$t" \
            --prompt-tokens "$p" --gen-tokens "$GEN_TOKENS" --runs "$RUNS"
          record "$k" transformers "$t" "$name"
        fi
      fi
      if [[ " $INFER_THREADS " == *" $t "* ]]; then
        for kv in ${INFER_KV_DTYPES:-default}; do
          echo "$k: infer (candle, ${DTYPE[$k]}, kv $kv), $p prompt tokens, $t thread(s)..." >&2
          kv_flag=()
          [ "$kv" = default ] || kv_flag=(--kv-dtype "$kv")
          name="infer-$k-p$p-kv$kv-t$t"
          measure "$name" env CANDLE_NUM_THREADS="$t" RAYON_NUM_THREADS="$t" "$OUT/infer" bench \
            --model "$model" --backend candle --dtype "${DTYPE[$k]}" "${kv_flag[@]}" --prompt-tokens "$p" \
            --gen-tokens "$GEN_TOKENS" --runs "$RUNS" --json
          record "$k" infer "$t" "$name"
        done
      fi
    done
  done
done

python3 "$REPO/tools/bench/report.py" "$OUT" | tee "$OUT/report.md"
