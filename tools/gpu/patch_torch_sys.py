#!/usr/bin/env python3
"""Stubs the torch-sys wrapper functions that an older libtorch cannot compile.

    tools/gpu/patch_torch_sys.py DIR BUILD_LOG

DIR is a copy of the torch-sys crate (tools/gpu_check.sh makes it and points cargo at it with
`patch.crates-io`); BUILD_LOG is cargo's output from a failed build of that copy. Every function of
DIR/libtch/torch_api_generated.cpp in which the log shows a compiler error (an ATen op the libtorch
lacks, or one whose signature changed) gets a body that throws (and returns a zero value where the
wrapper returns one); the wrapper's PROTECT turns that into a tch error, so such an op fails
cleanly if called. infer calls none of them. Prints how many
functions it stubbed; exits 1 when the log names no error in that file (nothing left to stub).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ERROR = re.compile(r"libtch/torch_api_generated\.cpp:(\d+):\d+: error:")
# A wrapper's first line: `<return type> atg_<op>(<params>) {` at column 0.
DEFINITION = re.compile(r"^(?P<ret>\S.*?)\s*\b(?P<name>atg\w*)\(.*\{$")


def main() -> None:
    crate, log = Path(sys.argv[1]), Path(sys.argv[2])
    src = crate / "libtch" / "torch_api_generated.cpp"
    lines = src.read_text().split("\n")
    bad = {int(m.group(1)) for m in ERROR.finditer(log.read_text(errors="replace"))}
    if not bad:
        sys.exit("patch_torch_sys: no compiler error in torch_api_generated.cpp in the log")
    spans = set()
    for n in bad:
        i = n - 1
        while not DEFINITION.match(lines[i]):
            i -= 1
        j = n - 1
        while lines[j] != "}":
            j += 1
        spans.add((i, j))
    # Bottom up, so that the line numbers of the spans above stay valid.
    for i, j in sorted(spans, reverse=True):
        m = DEFINITION.match(lines[i])
        body = [f'  PROTECT(throw std::runtime_error("{m["name"]}: not in the libtorch this was built against");)']
        if m["ret"] != "void":
            body.append("  return {};")
        lines[i + 1 : j] = body
    src.write_text("\n".join(lines))
    print(f"patch_torch_sys: stubbed {len(spans)} functions")


if __name__ == "__main__":
    main()
