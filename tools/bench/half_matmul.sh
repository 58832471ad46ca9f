#!/usr/bin/env bash
# Half-precision weight products in the candle backend, old path against new in one run, at 1
# and 2 threads: the bf16 decode matvec (GB/s of weights read, AVX2 widening vs AVX-512 BF16)
# and the many-row products (GFLOP/s, candle's matmul vs half_gemm's kernels: f32 panels,
# AVX-512 BF16 vdpbf16ps tiles, and AMX-BF16 tiles where the process may use them; f32 gemm as
# ceiling). The first line of each thread count names the bf16 product kernel the process got.
# Prints markdown tables (docs/benchmarks.md has the numbers).
#
#   tools/bench/half_matmul.sh [--no-build] [NAME...]   # NAME: rows whose label contains it
#
# Environment: THREADS ["1 2"]; CARGO_TARGET_DIR [target]. The bench binary is copied to
# BENCH_OUT [/tmp/infer-half-matmul] before it runs, so later builds cannot change what is measured.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${BENCH_OUT:-/tmp/infer-half-matmul}"
BUILD=1
if [[ "${1:-}" == "--no-build" ]]; then
  BUILD=0
  shift
fi
mkdir -p "$OUT"
if [[ $BUILD == 1 ]]; then
  (cd "$REPO" && cargo bench -p infer-backend-candle --bench half_matmul --no-run 2>&1 | tail -1)
fi
BIN=$(ls -t "${CARGO_TARGET_DIR:-$REPO/target}"/release/deps/half_matmul-* | grep -v '\.d$' | head -1)
cp "$BIN" "$OUT/half_matmul"
echo "# $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/')"
grep -m1 'model name' /proc/cpuinfo
for t in ${THREADS:-1 2}; do
  echo
  RAYON_NUM_THREADS=$t CANDLE_NUM_THREADS=$t "$OUT/half_matmul" "$@"
done
