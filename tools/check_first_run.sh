#!/usr/bin/env bash
# The README's first command run as a new user runs it: from a clean cargo target directory,
# with no cmake on PATH (a fresh machine of the project's kind has none). Catches a default
# build that grows a build-tool dependency (it happened: opus via cmake).
#
#   tools/check_first_run.sh      # target dir: ${INFER_FIRST_RUN_TARGET:-~/.cache/infer/first-run-target}, wiped first
set -euo pipefail
cd "$(dirname "$0")/.."

cmd=$(awk '/^```sh$/ { getline; print; exit }' README.md)
case "$cmd" in
    *"cargo run --release -p infer-cli -- run"*) ;;
    *) echo "check_first_run: the README's first command is not the run command: $cmd" >&2; exit 1 ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A PATH without cmake: one directory linking every other program on the current PATH.
bin="$work/bin"
mkdir -p "$bin"
IFS=: read -ra dirs <<< "$PATH"
for d in "${dirs[@]}"; do
    [ -d "$d" ] || continue
    for f in "$d"/*; do
        name=${f##*/}
        case "$name" in cmake | cmake3 | ccmake | ctest | cpack) continue ;; esac
        [ -x "$f" ] && [ ! -e "$bin/$name" ] && ln -s "$f" "$bin/$name"
    done
done
if PATH="$bin" command -v cmake >/dev/null; then
    echo "check_first_run: cmake still on the filtered PATH" >&2
    exit 1
fi

target="${INFER_FIRST_RUN_TARGET:-$HOME/.cache/infer/first-run-target}"
rm -rf "$target"
echo "check_first_run: $cmd"
echo "check_first_run: CARGO_TARGET_DIR=$target (clean), no cmake on PATH"
start=$(date +%s)
PATH="$bin" CARGO_TARGET_DIR="$target" CARGO_TERM_COLOR=never bash -c "$cmd" >"$work/out" 2>"$work/err" || {
    echo "check_first_run: FAILED after $(($(date +%s) - start)) s" >&2
    tail -30 "$work/err" >&2
    exit 1
}
text=$(tr -d '[:space:]' <"$work/out")
if [ -z "$text" ]; then
    echo "check_first_run: the command printed no text" >&2
    tail -5 "$work/err" >&2
    exit 1
fi
echo "check_first_run: ok in $(($(date +%s) - start)) s; it printed:"
head -c 400 "$work/out"
echo
grep -E '^\[' "$work/err" | tail -1 || true
# The clean build is large; a later run wipes and rebuilds it anyway.
rm -rf "$target"
