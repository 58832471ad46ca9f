#!/usr/bin/env bash
# `infer serve` (continuous batching) vs llama-cpp-python's OpenAI server on the same GGUF files:
# aggregate decode throughput at 1, 4 and 16 concurrent streaming completions, both servers in one
# run, back to back, each in a fresh process. Prints a markdown table (docs/serve.md has numbers).
#
#   tools/bench/serve.sh [gemma] [qwen]          # default: both
#
# Needs: the release binary (INFER_BIN; build it and copy it away first, other sessions may
# rebuild target/), tools/models/fetch.sh (the GGUFs), tools/serve/setup_openai_venv.sh (the
# client) and tools/serve/setup_llamacpp_server_venv.sh (the peer).
# Knobs [defaults]: STREAMS ["1 4 16"]  MAX_TOKENS [64]  PARALLEL [16] (infer's slots)
#   THREADS [2] (llama.cpp's threads; infer uses every core)  INFER_BIN [target/release/infer]
#   IDLE_QUIET_S [30] IDLE_MAX_WAIT_S [600] (wait for no compiler process, as compare.sh does)
#   PORT [18080]  INFER_MODELS_DIR [~/.cache/infer/models]  INFER_VENV_DIR [~/.cache/infer/venvs]
#
# llama-cpp-python's server runs one completion at a time (no slots: requests queue on a lock),
# so its aggregate stays near one stream's rate; that is the comparison a user of it gets.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODELS_DIR="${INFER_MODELS_DIR:-$HOME/.cache/infer/models}"
STREAMS="${STREAMS:-1 4 16}"
MAX_TOKENS="${MAX_TOKENS:-64}"
PARALLEL="${PARALLEL:-16}"
THREADS="${THREADS:-2}"
INFER_BIN="${INFER_BIN:-$REPO/target/release/infer}"
IDLE_QUIET_S="${IDLE_QUIET_S:-30}"
IDLE_MAX_WAIT_S="${IDLE_MAX_WAIT_S:-600}"
PORT="${PORT:-18080}"
declare -A FILE=([gemma]=gemma-3-270m-q4_k_m.gguf [qwen]=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf)

keys=("$@")
[ ${#keys[@]} -gt 0 ] || keys=(gemma qwen)
[ -x "$INFER_BIN" ] || { echo "no infer binary at $INFER_BIN (cargo build --release -p infer-cli)" >&2; exit 1; }
CLIENT="$("$REPO/tools/serve/setup_openai_venv.sh")"
PEER="$("$REPO/tools/serve/setup_llamacpp_server_venv.sh")"

# shellcheck source=idle.sh
source "$REPO/tools/bench/idle.sh"
waited=0 quiet=0
while [ "$quiet" -lt "$IDLE_QUIET_S" ] && [ "$waited" -lt "$IDLE_MAX_WAIT_S" ]; do
  if busy; then quiet=0; else quiet=$((quiet + 1)); fi
  sleep 1; waited=$((waited + 1))
done
idle="idle for ${quiet} s before measuring"
[ "$quiet" -ge "$IDLE_QUIET_S" ] || idle="NOT idle: a compiler ran within the last ${IDLE_QUIET_S} s (measured under load)"
echo "# $(date -u '+%F %T') UTC, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $idle" >&2

server=""
stop() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  server=""
}
trap stop EXIT

# Starts a server (the command in "$@") and waits until it lists its models.
start() {
  "$@" >/tmp/serve-bench-server.log 2>&1 &
  server=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && return 0
    kill -0 "$server" 2>/dev/null || { cat /tmp/serve-bench-server.log >&2; exit 1; }
    sleep 0.5
  done
  echo "server did not start" >&2; exit 1
}

results=()
for k in "${keys[@]}"; do
  path="$MODELS_DIR/${FILE[$k]}"
  name="${FILE[$k]%.gguf}"
  [ -f "$path" ] || { echo "$path is missing: tools/models/fetch.sh" >&2; exit 1; }
  for impl in llama.cpp infer; do
    for n in $STREAMS; do
      # A fresh server per point: no state carries over between stream counts.
      if [ "$impl" = infer ]; then
        start "$INFER_BIN" serve --model "$path" --port "$PORT" --parallel "$PARALLEL"
      else
        start "$PEER" -m llama_cpp.server --model "$path" --model_alias "$name" --host 127.0.0.1 \
          --port "$PORT" --n_threads "$THREADS" --n_ctx 4096 --interrupt_requests False
      fi
      r="$("$CLIENT" "$REPO/tools/bench/serve_load.py" "http://127.0.0.1:$PORT/v1" "$name" "$n" "$MAX_TOKENS")"
      stop
      echo "$k $impl $r" >&2
      results+=("$k|$impl|$r")
    done
  done
done

printf '%s\n' "${results[@]}" | "$CLIENT" "$REPO/tools/bench/serve_table.py" "$MAX_TOKENS" "$PARALLEL" "$THREADS"
