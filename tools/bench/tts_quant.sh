#!/usr/bin/env bash
# Qwen3-TTS weight formats side by side in one run of one infer binary: synthesis time, RTF,
# talker + predictor / codec split, peak RSS, and how many of the greedy codes agree with f32's.
# Prints a markdown table (medians over ROUNDS runs a format, the formats interleaved so that all
# see the same machine).
#
#   tools/bench/tts_quant.sh INFER_BIN [CHECKPOINT]
#
# CHECKPOINT defaults to ~/.cache/infer/bench/qwen3-tts-0.6b-random (tools/bench/make_qwen3_tts_bench.py).
# Copy the binary out of a shared target directory first: another build may overwrite it.
# Environment knobs (defaults in brackets): FRAMES [25] ROUNDS [3] THREADS [2]
# FORMATS ["f32 bf16 f32+q8_0"]: a compute dtype, optionally +QUANT (infer speak --dtype D --quant Q).
# Agreement counts frames (all 16 codes) and codes equal to the f32 run's at the same position:
# greedy decoding is autoregressive, so the first differing code changes everything after it;
# "first diff" is the frame where that happens.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 INFER_BIN [CHECKPOINT]" >&2; exit 2; }
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$1"
CKPT="${2:-$HOME/.cache/infer/bench/qwen3-tts-0.6b-random}"
FRAMES="${FRAMES:-25}" ROUNDS="${ROUNDS:-3}" THREADS="${THREADS:-2}" FORMATS="${FORMATS:-f32 bf16 f32+q8_0}"
OUT="$(mktemp -d /tmp/tts-quant-XXXXXX)"
echo "results -> $OUT; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

side() { # side FORMAT FRAMES RUNS [extra args]
  local fmt="$1" frames="$2" runs="$3"; shift 3
  local dt="${fmt%%+*}" q=""
  [[ "$fmt" == *+* ]] && q="--quant ${fmt#*+}"
  # shellcheck disable=SC2086
  python3 "$REPO/tools/bench/tts_bench.py" infer "$CKPT" --infer "$BIN" --frames "$frames" --runs "$runs" \
    --threads "$THREADS" --dtype "$dt" $q "$@"
}

# One untimed run a format warms the page cache (and writes its codes for the agreement columns).
for fmt in $FORMATS; do
  side "$fmt" "$FRAMES" 1 --codes-out "$OUT/codes-$fmt.tsv" >/dev/null
done
for r in $(seq "$ROUNDS"); do
  for fmt in $FORMATS; do
    la="$(cut -d' ' -f1 /proc/loadavg)"
    side "$fmt" "$FRAMES" 1 | tail -1 |
      python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r.update(format=sys.argv[1], loadavg=float(sys.argv[2])); print(json.dumps(r))' \
        "$fmt" "$la" >>"$OUT/runs.jsonl"
    echo "round $r $fmt done" >&2
  done
done

python3 - "$OUT" "$CKPT" "$FRAMES" "$FORMATS" <<'PY'
import json, statistics, sys
out, ckpt, frames, formats = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
runs = [json.loads(l) for l in open(f"{out}/runs.jsonl") if l.strip()]
codes = lambda f: [l.split() for l in open(f"{out}/codes-{f}.tsv") if l.strip()]
ref = codes("f32") if "f32" in formats else None
med = lambda xs: statistics.median(xs) if xs else float("nan")
print(f"checkpoint {ckpt}, {frames} frames, medians of {len(runs) // len(formats)} runs a format")
print("| format | synth s | RTF | talker+predictor s | codec decode s | peak RSS MB | frames = f32 | codes = f32 | first diff | load avg |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for f in formats:
    rs = [r for r in runs if r["format"] == f]
    synth, dec = med([r["synth_s"] for r in rs]), med([r["decode_s"] for r in rs if r["decode_s"] is not None])
    agree = "n/a"
    if ref is not None:
        c = codes(f)
        n = min(len(c), len(ref))
        same_frames = sum(a == b for a, b in zip(c, ref))
        same_codes = sum(x == y for a, b in zip(c, ref) for x, y in zip(a, b))
        first = next((i for i, (a, b) in enumerate(zip(c, ref)) if a != b), None)
        total = sum(len(a) for a in ref[:n])
        agree = f"{same_frames}/{len(ref)} | {same_codes}/{total} | {'none' if first is None else first}"
    print(f"| {f} | {synth:.2f} | {synth / med([r['audio_s'] for r in rs]):.2f} | {synth - dec:.2f} | {dec:.2f} "
          f"| {max(r['peak_rss_bytes'] for r in rs) / 2**20:.0f} | {agree} "
          f"| {min(r['loadavg'] for r in rs):.1f}–{max(r['loadavg'] for r in rs):.1f} |")
PY
