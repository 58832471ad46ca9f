#!/usr/bin/env bash
# Fuzzes every reader infer owns (fuzz/fuzz_targets/) with libFuzzer through cargo-fuzz, each
# target for a bounded time, starting from seed corpora made of real files (the fixtures, the
# real models of tools/models/fetch.sh, audio in every format `infer speak` writes).
#
#   tools/fuzz.sh                    every target, 60 s each
#   tools/fuzz.sh gguf_file tekken   only these
#   FUZZ_SECONDS=600 tools/fuzz.sh   longer
#
# Environment: FUZZ_SECONDS (per target, default 60), FUZZ_RSS_MB (libFuzzer's memory limit,
# default 2048), FUZZ_DIR (corpora, crash inputs and logs; default ~/.cache/infer/fuzz),
# INFER_FUZZ_TARGET_DIR (cargo's target dir; default ~/.cache/infer/target-fuzz).
# One libFuzzer job per target, one target at a time. Corpora grow across runs. A crash input is
# left as FUZZ_DIR/artifacts/<target>/crash-*; reproduce it with
# `$INFER_FUZZ_TARGET_DIR/x86_64-unknown-linux-gnu/release/<target> <file>`. Exit status 1 when
# any target crashed. Prints one line per target: executions, corpus size, crashes.
# `http_server` runs two real servers (tiny fixture models) on free loopback ports for its run.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-60}
rss_mb=${FUZZ_RSS_MB:-2048}
work=${FUZZ_DIR:-$HOME/.cache/infer/fuzz}
export CARGO_TARGET_DIR=${INFER_FUZZ_TARGET_DIR:-$HOME/.cache/infer/target-fuzz}
# cargo-fuzz passes a few unstable flags; the stable toolchain accepts them this way. No
# sanitizer: the readers are safe Rust, so a bug shows as a panic or an abort, which libFuzzer
# catches without one (and the instrumented build stays fast).
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

all_targets=$(cargo fuzz list | grep -v '^make_seeds$')
targets=${*:-$all_targets}
cargo fuzz build --sanitizer none
bin=$CARGO_TARGET_DIR/$(rustc -vV | sed -n 's/^host: //p')/release

# Seeds are rewritten on every run (from the files as they are now); corpora are kept.
rm -rf "$work/seeds"
INFER_FUZZ_SEEDS=$work/seeds "$bin/make_seeds"

failed=0
summary=()
for t in $targets; do
    corpus=$work/corpus/$t
    artifacts=$work/artifacts/$t
    log=$work/logs/$t.log
    # Targets whose input is a structure (arbitrary) start from an empty seed directory.
    mkdir -p "$corpus" "$artifacts" "$(dirname "$log")" "$work/seeds/$t"
    echo "== $t: ${seconds}s"
    # The files a target writes for its readers: in memory where possible, removed afterwards.
    scratch=$(mktemp -d "$([ -d /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/infer-fuzz-$t.XXXXXX")
    status=0
    INFER_FUZZ_SCRATCH=$scratch "$bin/$t" "$corpus" "$work/seeds/$t" -max_total_time="$seconds" -rss_limit_mb="$rss_mb" \
        -timeout=30 -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1 || status=$?
    rm -rf "$scratch"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    crashes=$(find "$artifacts" -type f | wc -l)
    inputs=$(find "$corpus" -type f | wc -l)
    if [ "$status" -ne 0 ]; then
        failed=1
        grep -m1 -E "panicked at|ERROR: libFuzzer|==[0-9]+== ERROR" "$log" || tail -5 "$log"
    fi
    summary+=("$(printf '%-24s %6ss %12s execs %6s corpus %3s crash inputs%s' "$t" "$seconds" "${execs:-?}" \
        "$inputs" "$crashes" "$([ "$status" -ne 0 ] && echo "  FAILED (see $log)")")")
done

echo
echo "target                    time        executions      corpus   crashes (kept in $work/artifacts)"
printf '%s\n' "${summary[@]}"
exit $failed
