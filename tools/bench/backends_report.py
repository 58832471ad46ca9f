#!/usr/bin/env python3
"""Markdown tables from a tools/bench/backends.sh result directory (standard library only).

    python3 tools/bench/backends_report.py RESULT_DIR

Reads machine.json, idle.json, bench-<key>-<backend>.out (`infer bench --json`) with its
.contention and .loadavg, graph-<key>.err (the MLX backend's INFER_MLX_PROFILE=1 lines:
"mlx eval: N ops, graph building X us, evaluation Y us", also "mlx read-back: ...") and
perf-<key>.dso.txt / .sym.txt when present.

A step of the lazy graph is a line that added ops plus the op-less evaluations that follow it
(a read-back of what the step computed). Decode steps are the steps with the most common op
count (prefill adds the same ops on a longer sequence; loading adds other counts): their
medians are reported.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

NAMES = {"gemma": "Gemma 3 270M Q4_K_M (GGUF)", "qwen3-tiny": "Qwen3 fixture qwen3/gqa (2 layers, d 64)",
         "qwen3-bf16": "Qwen3-0.6B shape, random (bf16 safetensors)"}
COMPUTE = {"candle": {"gemma": "Q4_K/Q6_K kernels"}, "tch": {"gemma": "f32, dequantized at load"},
           "mlx": {"gemma": "f32, dequantized at load"}, "mlx-reference-blas": {"gemma": "f32, dequantized at load"}}
VARIANTS = ("mlx-reference-blas", "candle", "tch", "mlx")
LINE = re.compile(r"^mlx (\S+): (\d+) ops, graph building (\d+) us, evaluation (\d+) us")


def fmt(x, nd=1):
    return "–" if x is None else f"{x:.{nd}f}"


def steps(err: str):
    out = []
    for line in err.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        ops, build, ev = int(m[2]), int(m[3]), int(m[4])
        if ops > 0 or not out:
            out.append([ops, build, ev])
        else:
            out[-1][2] += ev
    return out


def main() -> None:
    d = Path(sys.argv[1])
    machine = json.loads((d / "machine.json").read_text())
    idle = json.loads((d / "idle.json").read_text())
    benches = sorted(d.glob("bench-*.out"), key=lambda p: p.stat().st_mtime)
    rows = []
    for p in benches:
        stem = p.stem[len("bench-"):]
        backend = next(b for b in VARIANTS if stem.endswith("-" + b))
        key = stem[: -len(backend) - 1]
        res = json.loads(p.read_text())
        marks = (d / f"{p.stem}.contention").read_text().split()
        la = (d / f"{p.stem}.loadavg").read_text().split()
        rows.append((key, backend, res, marks, la))
    print(
        f"Prompt {machine['prompt_tokens']} tokens, {machine['gen_tokens']} generated (greedy, EOS ignored), "
        f"median of {machine['runs']} timed runs after 1 warm-up, {machine['threads']} thread(s) for candle, "
        f"tch and OpenBLAS; one `infer` binary ({machine['profile']} profile) with tch and MLX (mlx-cpu {machine['mlx_cpu']}, BLAS "
        f"{machine.get('mlx_blas', '?')}) as plugin libraries; commit {machine['commit']}, {machine['date']}. Machine: {machine['cpu']} "
        f"({machine['cores']} cores); idle before measuring: {'yes' if idle['idle'] else 'NO'} ({idle['note']})."
    )
    print()
    print("| checkpoint | backend | compute | prefill tok/s | decode tok/s | decode vs candle | TTFT ms "
          "| peak memory MB | load s | contended s | load avg |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    blas = "OpenBLAS" if "openblas" in machine.get("mlx_blas", "") else "reference BLAS"
    names = {"mlx": f"mlx ({blas})", "mlx-reference-blas": "mlx, wheel's reference BLAS preloaded"}
    candle = {k: r["decode_tok_s"] for k, b, r, _, _ in rows if b == "candle"}
    for key, backend, res, marks, la in rows:
        vs = res["decode_tok_s"] / candle[key] if key in candle and candle[key] else None
        compute = COMPUTE.get(backend, {}).get(key, res["dtype"])
        print(
            f"| {NAMES.get(key, key)} | {names.get(backend, backend)} | {compute} | {fmt(res['prefill_tok_s'])} "
            f"| {fmt(res['decode_tok_s'])} | {fmt(vs, 2)}x | {fmt(res['ttft_ms'], 0)} | {fmt(res['peak_rss_mb'], 0)} "
            f"| {fmt(res['load_seconds'], 2)} | {marks.count('1')}/{len(marks)} | {la[0]} → {la[1]} |"
        )

    graphs = sorted(d.glob("graph-*.err"))
    if graphs:
        print()
        print("MLX lazy graph per decode step (INFER_MLX_PROFILE=1, a separate run): ops the step adds "
              "through the plugin boundary, the time adding them (graph building) and evaluating them.")
        print()
        print("| checkpoint | decode steps seen | ops per step | graph building ms | per op us "
              "| evaluation ms | building share |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for g in graphs:
            key = g.stem[len("graph-"):]
            st = [s for s in steps(g.read_text()) if s[0] > 0]
            if not st:
                continue
            mode = statistics.mode(s[0] for s in st)
            dec = [s for s in st if s[0] == mode]
            build = statistics.median(s[1] for s in dec) / 1e3
            ev = statistics.median(s[2] for s in dec) / 1e3
            print(
                f"| {NAMES.get(key, key)} | {len(dec)} | {mode} | {build:.2f} | {build * 1e3 / mode:.2f} "
                f"| {ev:.2f} | {100 * build / (build + ev):.1f}% |"
            )

    for p in sorted(d.glob("perf-*.dso.txt")):
        stem = p.name[len("perf-"):-len(".dso.txt")]
        backend = "mlx-reference-blas" if stem.endswith("-mlx-reference-blas") else "mlx"
        key = stem[: -len(backend) - 1]
        print()
        print(f"perf profile of {names[backend]} on {NAMES.get(key, key)} (one warm-up + one timed "
              "generation, load included), by shared object and by symbol:")
        print()
        print("```")
        print(p.read_text().rstrip())
        sym = d / f"perf-{stem}.sym.txt"
        if sym.exists():
            print()
            print(sym.read_text().rstrip())
        print("```")


if __name__ == "__main__":
    main()
