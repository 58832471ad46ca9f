#!/usr/bin/env bash
# Qwen3-TTS: infer vs the official qwen-tts (PyTorch CPU) on the same checkpoints, side by side in
# one run: synthesis wall time, real-time factor, load time and peak RSS. Prints a markdown table
# (docs/benchmarks.md, "Qwen3-TTS: infer vs qwen-tts", has the numbers).
#
#   tools/bench/tts_compare.sh [--no-build] [tiny] [0.6b]
#
# Needs: tools/fixtures/setup_qwen_tts_venv.sh (qwen-tts 0.1.1) and the benchmark checkpoints
# (~/.cache/infer/venvs/qwen-tts/bin/python tools/bench/make_qwen3_tts_bench.py, ~2.5 GB under
# ~/.cache/infer/bench). Environment knobs (defaults in brackets):
#   FRAMES [50] frames to generate (12.5 a second: 50 = 4 s of audio; EOS is unreachable in both
#     checkpoints, so both implementations make exactly FRAMES frames)
#   RUNS [3] timed runs, medians reported (qwen-tts: one process, one short warm-up first;
#     infer: a fresh `infer speak` process per run)
#   THREADS [2] torch.set_num_threads / CANDLE_NUM_THREADS + RAYON_NUM_THREADS
#   DTYPES ["f32"] compute dtypes to measure (f32 and/or bf16), the same for both implementations
#   IDLE_QUIET_S [30] IDLE_LOAD [0.5] IDLE_MAX_WAIT_S [600]: before each checkpoint, wait until no
#     rustc/cargo/cc1plus/clippy-driver process has run for IDLE_QUIET_S seconds and the 1-minute
#     load average is below IDLE_LOAD, at most IDLE_MAX_WAIT_S (then measure anyway; the table
#     records the load average and the seconds a compiler ran during each measurement)
#   BENCH_OUT [/tmp/infer-tts-bench-<timestamp>]  CARGO_TARGET_DIR [~/.cache/infer/target]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BENCH_DIR="$HOME/.cache/infer/bench"
VENV="${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}/qwen-tts"
TARGET="${CARGO_TARGET_DIR:-$HOME/.cache/infer/target}"
FRAMES="${FRAMES:-50}"
RUNS="${RUNS:-3}"
THREADS="${THREADS:-2}"
DTYPES="${DTYPES:-f32}"
IDLE_QUIET_S="${IDLE_QUIET_S:-30}"
IDLE_LOAD="${IDLE_LOAD:-0.5}"
IDLE_MAX_WAIT_S="${IDLE_MAX_WAIT_S:-600}"
OUT="${BENCH_OUT:-/tmp/infer-tts-bench-$(date +%Y%m%d-%H%M%S)}"
export HF_HUB_OFFLINE=1

# shellcheck source=idle.sh
source "$REPO/tools/bench/idle.sh"

build=1
keys=()
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    tiny|0.6b) keys+=("$a") ;;
    *) echo "usage: $0 [--no-build] [tiny] [0.6b]" >&2; exit 2 ;;
  esac
done
[ ${#keys[@]} -gt 0 ] || keys=(tiny 0.6b)
declare -A DIRS=([tiny]="$BENCH_DIR/qwen3-tts-tiny" [0.6b]="$BENCH_DIR/qwen3-tts-0.6b-random")
for k in "${keys[@]}"; do
  [ -f "${DIRS[$k]}/model.safetensors" ] || {
    echo "missing ${DIRS[$k]}: run $VENV/bin/python tools/bench/make_qwen3_tts_bench.py" >&2; exit 1; }
done
[ -x "$VENV/bin/python" ] || { echo "missing $VENV: run tools/fixtures/setup_qwen_tts_venv.sh" >&2; exit 1; }

mkdir -p "$OUT"
echo "results -> $OUT" >&2
if [ "$build" = 1 ]; then
  echo "building infer-cli (release)..." >&2
  (cd "$REPO" && CARGO_TARGET_DIR="$TARGET" cargo build --release -p infer-cli) >&2
fi
# A private copy: other sessions may rebuild the target directory meanwhile.
cp "$TARGET/release/infer" "$OUT/infer"

commit="$(cd "$REPO" && git rev-parse --short HEAD)$(cd "$REPO" && git diff --quiet HEAD -- models/qwen3-tts core models/llm cli 2>/dev/null || echo '+dirty')"
cat > "$OUT/machine.json" <<EOF
{"cpu": "$(lscpu | sed -n 's/^Model name: *//p' | head -1)", "cores": $(nproc), "commit": "$commit", "date": "$(date -u +%FT%TZ)", "frames": $FRAMES, "runs": $RUNS, "threads": $THREADS}
EOF


# measure NAME CMD...: stdout (one JSON object) -> $OUT/NAME.json, plus the load average before
# and after and the number of seconds a compiler process was running.
measure() {
  local name="$1"; shift
  local rc=0
  run_sampled "$name" "$@" || rc=$?
  [ "$rc" = 0 ] || { echo "$name failed (rc $rc):" >&2; tail -20 "$OUT/$name.stderr" >&2; exit 1; }
  python3 - "$OUT" "$name" "$LOADAVG_START" "$LOADAVG_END" "$2" <<'PY'
import json, sys
out, name, la0, la1, key = sys.argv[1:]
# The last line: qwen-tts prints a banner on stdout when it is imported.
res = json.loads(open(f"{out}/{name}.json").read().strip().splitlines()[-1])
marks = open(f"{out}/{name}.contention").read().split()
res.update(name=name, loadavg_start=float(la0), loadavg_end=float(la1), contended_s=marks.count("1"), samples=len(marks))
with open(f"{out}/runs.jsonl", "a") as f:
    f.write(json.dumps(res) + "\n")
PY
}

: > "$OUT/runs.jsonl"
for k in "${keys[@]}"; do
  dir="${DIRS[$k]}"
  for dt in $DTYPES; do
    wait_idle
    echo "$k $dt: qwen-tts..." >&2
    measure "ref-$k-$dt" "$VENV/bin/python" "$REPO/tools/bench/tts_bench.py" ref "$dir" --frames "$FRAMES" \
      --runs "$RUNS" --threads "$THREADS" --dtype "$dt" --codes-out "$OUT/ref-$k-$dt.codes.tsv"
    echo "$k $dt: infer..." >&2
    measure "infer-$k-$dt" python3 "$REPO/tools/bench/tts_bench.py" infer "$dir" --infer "$OUT/infer" \
      --frames "$FRAMES" --runs "$RUNS" --threads "$THREADS" --dtype "$dt" --codes-out "$OUT/infer-$k-$dt.codes.tsv"
  done
done

python3 - "$OUT" <<'PY' | tee "$OUT/report.md"
import json, os, sys
from pathlib import Path
out = Path(sys.argv[1])
machine = json.loads((out / "machine.json").read_text())
runs = [json.loads(l) for l in (out / "runs.jsonl").read_text().splitlines() if l.strip()]
def size(d):
    return sum(f.stat().st_size for f in Path(d).rglob("*.safetensors"))
def f(x, nd=2):
    return "–" if x is None else f"{x:.{nd}f}"
print(f"{machine['frames']} frames a run, median of {machine['runs']} runs, {machine['threads']} threads, "
      f"{machine['cpu']} ({machine['cores']} cores), infer {machine['commit']}, {machine['date']}.")
print()
print("| checkpoint (weights on disk) | impl | dtype | synth s | audio s | RTF | talker+predictor s | codec decode s "
      "| load s | peak RSS MB | RSS / weights | load avg | compiler s |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in runs:
    w = size(r["checkpoint"])
    gen = r.get("generate_s")
    if r["impl"] == "infer" and r.get("talker_steps_s") is not None:
        gen = r["synth_s"] - (r.get("decode_s") or 0)
    print(f"| {os.path.basename(r['checkpoint'])} ({w / 1e6:.0f} MB) | {r['impl']} | {r['dtype']} | {f(r['synth_s'])} "
          f"| {f(r['audio_s'])} | {f(r['synth_s'] / r['audio_s'], 3)} | {f(gen)} | {f(r.get('decode_s'))} | {f(r['load_s'])} "
          f"| {r['peak_rss_bytes'] / 2**20:.0f} | {r['peak_rss_bytes'] / w:.2f} | {r['loadavg_start']:.1f}–{r['loadavg_end']:.1f} "
          f"| {r['contended_s']}/{r['samples']} |")
print()
print("| checkpoint | dtype | speed-up (qwen-tts synth / infer synth) | generate | decode | peak RSS infer / qwen-tts | same codes |")
print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
by = {(r["impl"], r["checkpoint"], r["dtype"]): r for r in runs}
for (impl, ck, dt), ref in by.items():
    if impl != "qwen-tts" or ("infer", ck, dt) not in by:
        continue
    inf = by[("infer", ck, dt)]
    inf_gen = inf["synth_s"] - (inf.get("decode_s") or 0)
    name = os.path.basename(ck)
    same = "?"
    for key in ("tiny", "0.6b"):
        ra, ia = out / f"ref-{key}-{dt}.codes.tsv", out / f"infer-{key}-{dt}.codes.tsv"
        if ref["name"] == f"ref-{key}-{dt}" and ra.exists() and ia.exists():
            x, y = ra.read_text().split("\n"), ia.read_text().split("\n")
            n = next((i for i, (p, q) in enumerate(zip(x, y)) if p.split() != q.split()), None)
            same = "all frames" if n is None else f"first {n} frames"
    dec = f(ref["decode_s"] / inf["decode_s"]) if inf.get("decode_s") else "–"
    print(f"| {name} | {dt} | **{ref['synth_s'] / inf['synth_s']:.2f}×** | {ref['generate_s'] / inf_gen:.2f}× | {dec} "
          f"| {inf['peak_rss_bytes'] / ref['peak_rss_bytes']:.2f} | {same} |")
PY
