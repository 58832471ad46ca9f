#!/usr/bin/env bash
# Qwen3-TTS: two infer binaries (before / after a change) side by side in one run, their runs
# interleaved so that both see the same machine: synthesis, codec decode and load time, peak RSS.
# Prints a markdown table (medians over ROUNDS runs a side).
#
#   tools/bench/tts_infer_ab.sh BEFORE_BIN AFTER_BIN [CHECKPOINT]
#
# CHECKPOINT defaults to ~/.cache/infer/bench/qwen3-tts-0.6b-random (tools/bench/make_qwen3_tts_bench.py).
# Copy the binaries out of a shared target directory first: another build may overwrite them.
# Environment knobs (defaults in brackets): FRAMES [25] ROUNDS [3] THREADS [2] DTYPES ["f32"]
# QUANT [none]: quantize the talker and code predictor at load (infer speak --quant QUANT, e.g. q8_0).
# The prefill / talker / predictor columns are infer's own split (INFER_LOG=infer_qwen3_tts=debug).
# Load time is the process's wall time less synthesis, with the page cache warm from the
# previous run (the first round warms it).
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 BEFORE_BIN AFTER_BIN [CHECKPOINT]" >&2; exit 2; }
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
A="$1" B="$2"
CKPT="${3:-$HOME/.cache/infer/bench/qwen3-tts-0.6b-random}"
FRAMES="${FRAMES:-25}" ROUNDS="${ROUNDS:-3}" THREADS="${THREADS:-2}" DTYPES="${DTYPES:-f32}" QUANT="${QUANT:-}"
Q=()
[ -n "$QUANT" ] && Q=(--quant "$QUANT")
OUT="$(mktemp -d /tmp/tts-ab-XXXXXX)"
echo "results -> $OUT; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

for dt in $DTYPES; do
  # One untimed run a side warms the page cache.
  for bin in "$A" "$B"; do
    python3 "$REPO/tools/bench/tts_bench.py" infer "$CKPT" --infer "$bin" --frames 2 --runs 1 --threads "$THREADS" \
      --dtype "$dt" "${Q[@]}" >/dev/null
  done
  for r in $(seq "$ROUNDS"); do
    for side in before after; do
      bin="$A"; [ "$side" = after ] && bin="$B"
      la="$(cut -d' ' -f1 /proc/loadavg)"
      python3 "$REPO/tools/bench/tts_bench.py" infer "$CKPT" --infer "$bin" --frames "$FRAMES" --runs 1 \
        --threads "$THREADS" --dtype "$dt" "${Q[@]}" | tail -1 |
        python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r.update(side=sys.argv[1], loadavg=float(sys.argv[2])); print(json.dumps(r))' \
          "$side" "$la" >>"$OUT/runs.jsonl"
      echo "$dt round $r $side done" >&2
    done
  done
done

python3 - "$OUT/runs.jsonl" "$CKPT" "$FRAMES" "$QUANT" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
quant = f", --quant {sys.argv[4]}" if sys.argv[4] else ""
print(f"checkpoint {sys.argv[2]}, {sys.argv[3]} frames{quant}, medians of {len(runs) // 2 // len({r['dtype'] for r in runs})} runs a side")
print("| dtype | side | synth s | RTF | talker+predictor s | prefill s | talker steps s | predictor s | ms a frame | codec decode s | load s | peak RSS MB | load avg |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
med = lambda xs: statistics.median(xs) if xs else float("nan")
for dt in dict.fromkeys(r["dtype"] for r in runs):
    for side in ["before", "after"]:
        rs = [r for r in runs if r["dtype"] == dt and r["side"] == side]
        synth, dec = med([r["synth_s"] for r in rs]), med([r["decode_s"] for r in rs if r["decode_s"] is not None])
        part = lambda k: med([r[k] for r in rs if r.get(k) is not None])
        talker, pred, frames = part("talker_steps_s"), part("code_predictor_s"), med([r["frames"] for r in rs])
        print(f"| {dt} | {side} | {synth:.2f} | {synth / med([r['audio_s'] for r in rs]):.2f} | {synth - dec:.2f} "
              f"| {part('prefill_s'):.2f} | {talker:.2f} | {pred:.2f} | {1000 * (talker + pred) / frames:.0f} "
              f"| {dec:.2f} | {med([r['load_s'] for r in rs]):.2f} | {max(r['peak_rss_bytes'] for r in rs) / 2**20:.0f} "
              f"| {min(r['loadavg'] for r in rs):.1f}–{max(r['loadavg'] for r in rs):.1f} |")
PY
