#!/usr/bin/env bash
# Prints, per test binary, the backend setups its tests ran on (the lines tests/src/lib.rs
# appends to INFER_SETUP_REPORT), and fails when a setup that INFER_SETUPS names ran nowhere
# or a setup was skipped.
#
#   tools/setups_ran.sh REPORT.tsv candle,tch,mlx
set -euo pipefail
report=$1
wanted=$2

if [ ! -s "$report" ]; then
    echo "setups_ran: no test recorded a setup in $report" >&2
    exit 1
fi
echo "setups_ran: the setups each test binary ran (tests using them):"
awk -F'\t' '$3 !~ /^skipped: / && !seen[$1 SUBSEP $3 SUBSEP $2]++ { count[$1 SUBSEP $3]++ }
    END {
        for (k in count) { split(k, p, SUBSEP); runs[p[1]] = runs[p[1]] " " p[2] "(" count[k] ")" }
        for (b in runs) printf "  %-24s%s\n", b, runs[b]
    }' "$report" | sort
status=0
if grep -q $'\tskipped: ' "$report"; then
    echo "setups_ran: skipped:" >&2
    awk -F'\t' '$3 ~ /^skipped: / { print "  " $1 ": " substr($3, 10) }' "$report" | sort -u >&2
    status=1
fi
IFS=, read -ra backends <<< "$wanted"
for b in "${backends[@]}"; do
    b=$(echo "$b" | tr -d ' ')
    case "$b" in
        candle) names=(candle candle-library) ;;
        tch) names=(tch-library) ;;
        mlx) names=(mlx-library) ;;
        cuda) names=(cuda) ;;
        *) echo "setups_ran: unknown backend $b in INFER_SETUPS" >&2; status=1; continue ;;
    esac
    for n in "${names[@]}"; do
        if ! awk -F'\t' -v n="$n" '$3 == n { found = 1 } END { exit !found }' "$report"; then
            echo "setups_ran: INFER_SETUPS names $b but no test ran the $n setup" >&2
            status=1
        fi
    done
done
exit "$status"
