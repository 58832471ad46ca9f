#!/usr/bin/env python3
"""Markdown tables from a tools/bench/compare.sh result directory (standard library only).

    python3 tools/bench/report.py RESULT_DIR

Reads RESULT_DIR/machine.json, idle.json, membw.json and runs.jsonl (one line per measurement:
{"impl", "model_key", "threads", "file_bytes", "contended_s", "samples", "loadavg_start",
"loadavg_end", "result": <infer bench --json or llamacpp_bench.py output>}).

Decode floor = read bandwidth (median, same thread count, membw.c) / GGUF file size: an
approximation of the bytes one decode step must stream (all weights once; it ignores the KV cache
and activations, and counts metadata/tokenizer bytes and, for tied embeddings, the embedding table
which a step reads only one row of — but Gemma's table is also its output matrix, read in full).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

NAMES = {"gemma": "Gemma 3 270M Q4_K_M", "qwen": "Qwen2.5-Coder 0.5B Q4_K_M"}


def load(d: Path):
    runs = [json.loads(l) for l in (d / "runs.jsonl").read_text().splitlines() if l.strip()]
    membw = json.loads((d / "membw.json").read_text())
    machine = json.loads((d / "machine.json").read_text())
    idle = json.loads((d / "idle.json").read_text())
    return runs, membw, machine, idle


def read_bw(membw: dict, threads: int) -> float | None:
    for r in membw["results"]:
        if r["threads"] == threads and r["op"] == "read":
            return r["median_gb_s"]
    return None


def fmt(x, nd=1):
    return "–" if x is None else f"{x:.{nd}f}"


def main() -> None:
    d = Path(sys.argv[1])
    runs, membw, machine, idle = load(d)
    out = []
    p = runs[0]["result"]
    out.append(
        f"Prompt {p['prompt_tokens']} tokens, {p['gen_tokens']} generated (greedy, EOS ignored), "
        f"median of {p['runs']} timed runs after 1 warm-up. "
        f"Machine: {machine['cpu']} ({machine['cores']} cores), idle before measuring: "
        f"{'yes' if idle['idle'] else 'NO'} ({idle['note']})."
    )
    out.append("")
    out.append("| model | impl | threads | prefill tok/s | decode tok/s | TTFT ms | peak RSS MB | load s "
               "| decode floor tok/s | % of floor | contended s |")
    out.append("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in runs:
        res = r["result"]
        bw = read_bw(membw, r["threads"])
        floor = bw * 1e9 / r["file_bytes"] if bw else None
        pct = 100 * res["decode_tok_s"] / floor if floor else None
        out.append(
            f"| {NAMES.get(r['model_key'], r['model_key'])} | {r['impl']} | {r['threads']} "
            f"| {fmt(res['prefill_tok_s'])} | {fmt(res['decode_tok_s'])} | {fmt(res['ttft_ms'], 0)} "
            f"| {fmt(res['peak_rss_mb'], 0)} | {fmt(res['load_seconds'], 2)} | {fmt(floor)} | {fmt(pct, 0)}% "
            f"| {r['contended_s']}/{r['samples']} |"
        )
    out.append("")
    out.append("Ratios infer / llama.cpp (same model; > 1 means infer is faster for tok/s, "
               "larger for TTFT and RSS):")
    out.append("")
    out.append("| model | infer threads | llama.cpp threads | prefill | decode | TTFT | peak RSS |")
    out.append("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    by = {(r["model_key"], r["impl"], r["threads"]): r["result"] for r in runs}
    models = list(dict.fromkeys(r["model_key"] for r in runs))
    for m in models:
        infer_threads = sorted({t for (mk, im, t) in by if mk == m and im == "infer"}, reverse=True)
        ll_threads = sorted({t for (mk, im, t) in by if mk == m and im == "llama.cpp"}, reverse=True)
        for it in infer_threads:
            for lt in ll_threads:
                if it != lt and it != max(infer_threads):
                    continue  # infer's other thread counts only against llama.cpp at the same count
                a, b = by[(m, "infer", it)], by[(m, "llama.cpp", lt)]
                out.append(
                    f"| {NAMES.get(m, m)} | {it} | {lt} | {a['prefill_tok_s'] / b['prefill_tok_s']:.2f} "
                    f"| {a['decode_tok_s'] / b['decode_tok_s']:.2f} | {a['ttft_ms'] / b['ttft_ms']:.2f} "
                    f"| {a['peak_rss_mb'] / b['peak_rss_mb']:.2f} |"
                )
    out.append("")
    out.append("Memory bandwidth (tools/bench/membw.c, 1 GiB buffer, GB/s = 1e9 B/s, median / best of "
               f"{membw['reps']}):")
    out.append("")
    out.append("| threads | read | memcpy (bytes copied) |")
    out.append("| --- | ---: | ---: |")
    for t in sorted({r["threads"] for r in membw["results"]}):
        rd = next(r for r in membw["results"] if r["threads"] == t and r["op"] == "read")
        cp = next(r for r in membw["results"] if r["threads"] == t and r["op"] == "memcpy")
        out.append(f"| {t} | {rd['median_gb_s']:.1f} / {rd['best_gb_s']:.1f} "
                   f"| {cp['median_gb_s']:.1f} / {cp['best_gb_s']:.1f} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
