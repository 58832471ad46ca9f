#!/usr/bin/env bash
# Time to first audio chunk of `infer speak --stream` (text in -> first chunk of audio written),
# Qwen3-TTS 0.6B and Voxtral TTS, each dtype in one run; prints a markdown table (docs/benchmarks.md,
# "Time to first audio chunk"). Load time is excluded: the clock starts when synthesis starts.
#
#   tools/bench/tts_ttfa.sh [--no-build]
#
# Needs the benchmark checkpoints under ~/.cache/infer/bench (tools/bench/make_qwen3_tts_bench.py,
# tools/bench/make_voxtral_tts_bench.py --shape real4); a missing one is skipped. Knobs [defaults]:
#   STREAM_FRAMES [1] frames per chunk (1 frame = 80 ms of audio, the smallest chunk)
#   FRAMES [3] frames generated a run (only the first chunk is timed)   RUNS [3] fresh processes, median
#   THREADS [2]   DTYPES ["f32 bf16"] (a dtype, optionally +QUANT: "f32+q8_0")   MODELS ["qwen3-tts-0.6b voxtral-tts-real4"]
#   TEXT [one sentence]   IDLE_QUIET_S [30] IDLE_LOAD [0.5] IDLE_MAX_WAIT_S [600] (as tts_compare.sh)
#   BENCH_OUT [/tmp/infer-ttfa-<timestamp>]   CARGO_TARGET_DIR [~/.cache/infer/target]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BENCH_DIR="$HOME/.cache/infer/bench"
TARGET="${CARGO_TARGET_DIR:-$HOME/.cache/infer/target}"
STREAM_FRAMES="${STREAM_FRAMES:-1}"
FRAMES="${FRAMES:-3}"
RUNS="${RUNS:-3}"
THREADS="${THREADS:-2}"
DTYPES="${DTYPES:-f32 bf16}"
MODELS="${MODELS:-qwen3-tts-0.6b voxtral-tts-real4}"
TEXT="${TEXT:-The quick brown fox jumps over the lazy dog.}"
IDLE_QUIET_S="${IDLE_QUIET_S:-30}"
IDLE_LOAD="${IDLE_LOAD:-0.5}"
IDLE_MAX_WAIT_S="${IDLE_MAX_WAIT_S:-600}"
OUT="${BENCH_OUT:-/tmp/infer-ttfa-$(date +%Y%m%d-%H%M%S)}"
export HF_HUB_OFFLINE=1

case "${1:-}" in
  --no-build) build=0 ;;
  "") build=1 ;;
  *) echo "usage: $0 [--no-build]" >&2; exit 2 ;;
esac

mkdir -p "$OUT"
echo "results -> $OUT" >&2
if [ "$build" = 1 ]; then
  echo "building infer-cli (release)..." >&2
  (cd "$REPO" && CARGO_TARGET_DIR="$TARGET" cargo build --release -p infer-cli) >&2
fi
# A private copy: other sessions may rebuild the target directory meanwhile.
cp "$TARGET/release/infer" "$OUT/infer"

# shellcheck source=idle.sh
source "$REPO/tools/bench/idle.sh"


# measure NAME CMD...: the command's JSON line plus load average and compiler seconds -> runs.jsonl
measure() {
  local name="$1"; shift
  local rc=0
  run_sampled "$name" "$@" || rc=$?
  [ "$rc" = 0 ] || { echo "$name failed (rc $rc):" >&2; tail -20 "$OUT/$name.stderr" >&2; exit 1; }
  python3 - "$OUT" "$name" "$LOADAVG_START" "$LOADAVG_END" <<'PY'
import json, sys
out, name, la0, la1 = sys.argv[1:]
res = json.loads(open(f"{out}/{name}.json").read().strip().splitlines()[-1])
marks = open(f"{out}/{name}.contention").read().split()
res.update(name=name, loadavg_start=float(la0), loadavg_end=float(la1), contended_s=marks.count("1"), samples=len(marks))
with open(f"{out}/runs.jsonl", "a") as f:
    f.write(json.dumps(res) + "\n")
PY
}

: > "$OUT/runs.jsonl"
common=(--infer "$OUT/infer" --frames "$FRAMES" --runs "$RUNS" --threads "$THREADS" --stream-frames "$STREAM_FRAMES")
for m in $MODELS; do
  case "$m" in
    qwen3-tts-0.6b) dir="$BENCH_DIR/qwen3-tts-0.6b-random"; script=tts_bench.py; extra=(--text "$TEXT") ;;
    voxtral-tts-real4) dir="$BENCH_DIR/voxtral-tts-real4"; script=voxtral_tts_bench.py; extra=() ;;
    *) echo "unknown model $m (qwen3-tts-0.6b, voxtral-tts-real4)" >&2; exit 2 ;;
  esac
  [ -d "$dir" ] || { echo "skipping $m: $dir is missing" >&2; continue; }
  for fmt in $DTYPES; do
    # FORMAT is a compute dtype, optionally +QUANT (infer speak --dtype D --quant Q), as in tts_quant.sh.
    dt="${fmt%%+*}" q=()
    [[ "$fmt" == *+* ]] && q=(--quant "${fmt#*+}")
    wait_idle
    echo "$m $fmt..." >&2
    measure "$m-$fmt" python3 "$REPO/tools/bench/$script" infer "$dir" "${common[@]}" --dtype "$dt" "${q[@]}" "${extra[@]}"
  done
done

python3 - "$OUT" "$STREAM_FRAMES" "$FRAMES" "$RUNS" "$THREADS" <<'PY' | tee "$OUT/report.md"
import json, sys
from pathlib import Path
out, chunk, frames, runs, threads = Path(sys.argv[1]), *sys.argv[2:]
def f(x, nd=3):
    return "–" if x is None else f"{x:.{nd}f}"
print(f"`infer speak --stream --stream-frames {chunk}` ({int(chunk) * 80} ms chunks), {frames} frames a run, "
      f"median of {runs} fresh processes, {threads} threads; seconds from the start of synthesis (load excluded).")
print()
print("| model | dtype | first audio s | prompt prefill s | first frame's code predictor s | first chunk decode s "
      "| whole run s (frames) | load avg | compiler s |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for line in (out / "runs.jsonl").read_text().splitlines():
    r = json.loads(line)
    model = r["name"].rsplit("-", 1)[0]
    prefill = r.get("first_prefill_s", r.get("prefill_s"))
    fmt = r["dtype"] + (f"+{r['quant']}" if r.get("quant") else "")
    print(f"| {model} | {fmt} | **{f(r['first_audio_s'])}** | {f(prefill)} | {f(r.get('first_predictor_s'))} "
          f"| {f(r.get('first_decode_s'))} | {f(r['synth_s'], 2)} ({int(r['frames'])}) "
          f"| {r['loadavg_start']:.1f}–{r['loadavg_end']:.1f} | {r['contended_s']}/{r['samples']} |")
PY
