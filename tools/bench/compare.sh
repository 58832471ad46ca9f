#!/usr/bin/env bash
# infer vs llama.cpp on the real GGUF checkpoints, side by side, plus this box's memory-bandwidth
# floor. Writes a result directory and prints markdown tables (docs/benchmarks.md has the numbers).
#
#   tools/bench/compare.sh [--no-build] [gemma] [qwen]
#
# Needs: tools/models/fetch.sh (the GGUFs), tools/fixtures/setup_llamacpp_venv.sh (llama-cpp-python
# 0.3.36), gcc. Environment knobs (defaults in brackets):
#   PROMPT_TOKENS [128]  GEN_TOKENS [64]  RUNS [3]  (medians of RUNS timed runs after one warm-up)
#   INFER_THREADS ["2 1"]  LLAMA_THREADS ["2 1"]  thread counts to measure
#   IDLE_QUIET_S [30] IDLE_MAX_WAIT_S [600]: before measuring, wait until no rustc/cargo/cc1plus/
#     clippy-driver process has run for IDLE_QUIET_S seconds in a row, at most IDLE_MAX_WAIT_S
#     (then measure anyway and record that the box was not idle)
#   BENCH_OUT [/tmp/infer-bench-<timestamp>]  result directory
#   INFER_MODELS_DIR [~/.cache/infer/models]  INFER_VENV_DIR [~/.cache/infer/venvs]
#
# Steps: build target/release/infer (unless --no-build; never during measurement), copy it into the
# result directory (other sessions may rebuild target/ meanwhile), wait for idle, measure membw.c
# at 1 and 2 threads, then per model: llama.cpp and infer at each thread count, each in a fresh
# process. During every measurement a sampler notes once a second whether a compiler process runs;
# "contended s" in the table is how many of those seconds were.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODELS_DIR="${INFER_MODELS_DIR:-$HOME/.cache/infer/models}"
VENV="${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}/llamacpp"
PROMPT_TOKENS="${PROMPT_TOKENS:-128}"
GEN_TOKENS="${GEN_TOKENS:-64}"
RUNS="${RUNS:-3}"
INFER_THREADS="${INFER_THREADS:-2 1}"
LLAMA_THREADS="${LLAMA_THREADS:-2 1}"
IDLE_QUIET_S="${IDLE_QUIET_S:-30}"
IDLE_MAX_WAIT_S="${IDLE_MAX_WAIT_S:-600}"
OUT="${BENCH_OUT:-/tmp/infer-bench-$(date +%Y%m%d-%H%M%S)}"
# Any process whose name contains one of these (cargo also matches cargo-clippy; a `cargo test`
# keeps its cargo process alive while the test binaries run).
busy() {
  local n
  for n in rustc cargo cc1plus clippy-driver; do pgrep "$n" >/dev/null && return 0; done
  return 1
}

build=1
keys=()
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    gemma|qwen) keys+=("$a") ;;
    *) echo "usage: $0 [--no-build] [gemma] [qwen]" >&2; exit 2 ;;
  esac
done
[ ${#keys[@]} -gt 0 ] || keys=(gemma qwen)
declare -A FILES=([gemma]=gemma-3-270m-q4_k_m.gguf [qwen]=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf)

for k in "${keys[@]}"; do
  [ -f "$MODELS_DIR/${FILES[$k]}" ] || { echo "missing $MODELS_DIR/${FILES[$k]}: run tools/models/fetch.sh" >&2; exit 1; }
done
[ -x "$VENV/bin/python" ] || { echo "missing $VENV: run tools/fixtures/setup_llamacpp_venv.sh" >&2; exit 1; }

mkdir -p "$OUT"
echo "results -> $OUT" >&2

if [ "$build" = 1 ]; then
  echo "building infer-cli (release)..." >&2
  (cd "$REPO" && cargo build --release -p infer-cli) >&2
fi
cp "$REPO/target/release/infer" "$OUT/infer"
gcc -O3 -mavx2 -pthread -o "$OUT/membw" "$REPO/tools/bench/membw.c"

# Machine description.
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
cores="$(nproc)"
mem_gb="$(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo)"
commit="$(cd "$REPO" && git rev-parse --short HEAD)$(cd "$REPO" && git diff --quiet HEAD -- . 2>/dev/null || echo '+dirty')"
cat > "$OUT/machine.json" <<EOF
{"cpu": "$cpu", "cores": $cores, "mem_gib": $mem_gb, "kernel": "$(uname -r)", "commit": "$commit", "date": "$(date -u +%FT%TZ)"}
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
  local marks="$OUT/$name.contention"
  : > "$marks"
  ( while :; do if busy; then echo 1; else echo 0; fi; sleep 1; done >> "$marks" ) &
  local sampler=$!
  local la0; la0="$(cut -d' ' -f1 /proc/loadavg)"
  local rc=0
  "$@" > "$OUT/$name.json" 2> "$OUT/$name.stderr" || rc=$?
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
  echo "$la0 $(cut -d' ' -f1 /proc/loadavg)" > "$OUT/$name.loadavg"
  [ "$rc" = 0 ] || { echo "$name failed (rc $rc):" >&2; cat "$OUT/$name.stderr" >&2; exit 1; }
}

# record KEY IMPL THREADS NAME: appends one line to runs.jsonl.
record() {
  local key="$1" impl="$2" threads="$3" name="$4"
  python3 - "$OUT" "$key" "$impl" "$threads" "$name" "$(stat -c %s "$MODELS_DIR/${FILES[$key]}")" <<'PY'
import json, sys
out, key, impl, threads, name, size = sys.argv[1:]
marks = open(f"{out}/{name}.contention").read().split()
la = open(f"{out}/{name}.loadavg").read().split()
line = {"impl": impl, "model_key": key, "threads": int(threads), "file_bytes": int(size),
        "contended_s": marks.count("1"), "samples": len(marks),
        "loadavg_start": float(la[0]), "loadavg_end": float(la[1]),
        "result": json.loads(open(f"{out}/{name}.json").read())}
with open(f"{out}/runs.jsonl", "a") as f:
    f.write(json.dumps(line) + "\n")
PY
}

: > "$OUT/runs.jsonl"
echo "membw..." >&2
measure membw "$OUT/membw" 1 2

for k in "${keys[@]}"; do
  model="$MODELS_DIR/${FILES[$k]}"
  for t in $(printf '%s\n' $LLAMA_THREADS $INFER_THREADS | sort -rnu); do
    if [[ " $LLAMA_THREADS " == *" $t "* ]]; then
      echo "$k: llama.cpp, $t thread(s)..." >&2
      measure "llamacpp-$k-t$t" "$VENV/bin/python" "$REPO/tools/bench/llamacpp_bench.py" "$model" \
        --threads "$t" --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS" --runs "$RUNS"
      record "$k" llama.cpp "$t" "llamacpp-$k-t$t"
    fi
    if [[ " $INFER_THREADS " == *" $t "* ]]; then
      echo "$k: infer (candle), $t thread(s)..." >&2
      measure "infer-$k-t$t" env CANDLE_NUM_THREADS="$t" RAYON_NUM_THREADS="$t" "$OUT/infer" bench \
        --model "$model" --backend candle --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS" \
        --runs "$RUNS" --json
      record "$k" infer "$t" "infer-$k-t$t"
    fi
  done
done

python3 "$REPO/tools/bench/report.py" "$OUT" | tee "$OUT/report.md"
