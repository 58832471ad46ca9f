#!/usr/bin/env bash
# The example plugins as their authors get them: each crate in examples/ that is a plugin is
# copied out of the tree, its `infer-sdk` path pointed at this checkout, and built from a clean
# target directory. Also checks that the SDK links none of the heavy libraries a plugin must not
# pay for. Prints each example's clean build time.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

heavy='candle|tokenizers|minijinja|symphonia|rubato|realfft|tiktoken|hound'
if found=$(cargo tree -p infer-sdk -e normal --prefix none | grep -E "^($heavy)" | sort -u) && [ -n "$found" ]; then
    echo "check_examples_out_of_tree: infer-sdk depends on $found" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for example in examples/bigram-plugin examples/olmo2-plugin; do
    name="$(basename "$example")"
    cp -r "$example" "$work/$name"
    # The versions this checkout is tested with.
    cp Cargo.lock "$work/$name/"
    # The one edit an author makes: where their infer checkout is.
    sed -i "s|path = \"../../|path = \"$root/|" "$work/$name/Cargo.toml"
    start=$(date +%s)
    (cd "$work/$name" && CARGO_TARGET_DIR="$work/target-$name" cargo build --quiet --lib)
    echo "check_examples_out_of_tree: $name builds out of the tree, clean, in $(( $(date +%s) - start )) s"
done
