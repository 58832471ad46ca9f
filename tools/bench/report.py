#!/usr/bin/env python3
"""Markdown tables from a tools/bench/compare.sh result directory (standard library only).

    python3 tools/bench/report.py RESULT_DIR

Reads RESULT_DIR/machine.json, idle.json, membw.json and runs.jsonl (one line per measurement:
{"impl", "model_key", "threads", "file_bytes", "contended_s", "samples", "loadavg_start",
"loadavg_end", "result": <infer bench --json, llamacpp_bench.py or transformers_bench.py output>}).
Each model is compared with one peer: llama.cpp (GGUF) or transformers (safetensors).

Decode floor = read bandwidth (median, same thread count, membw.c) / weight bytes on disk (the GGUF
file, or the folder's *.safetensors): an approximation of the bytes one decode step must stream
(all weights once; it ignores the KV cache and activations, and counts metadata/tokenizer bytes
and, for untied embeddings, the embedding table which a step reads only one row of — a tied table
is also the output matrix, read in full).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

NAMES = {"gemma": "Gemma 3 270M Q4_K_M", "qwen": "Qwen2.5-Coder 0.5B Q4_K_M",
         "qwen3-bf16": "Qwen3-0.6B shape, random, bf16 safetensors"}


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
    prompts = sorted({r["result"]["prompt_tokens"] for r in runs})
    out.append(
        f"Prompt {' / '.join(map(str, prompts))} tokens (decode runs after the prompt, at that depth), "
        f"{p['gen_tokens']} generated (greedy, EOS ignored), "
        f"median of {p['runs']} timed runs after 1 warm-up. "
        f"Machine: {machine['cpu']} ({machine['cores']} cores), idle before measuring: "
        f"{'yes' if idle['idle'] else 'NO'} ({idle['note']})."
    )
    out.append("")
    out.append("| model | prompt | impl | KV | threads | prefill tok/s | decode tok/s | TTFT ms | peak RSS MB | load s "
               "| decode floor tok/s | % of floor | contended s | load avg |")
    out.append("| --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in sorted(runs, key=lambda r: r["result"]["prompt_tokens"]):
        res = r["result"]
        bw = read_bw(membw, r["threads"])
        floor = bw * 1e9 / r["file_bytes"] if bw else None
        pct = 100 * res["decode_tok_s"] / floor if floor else None
        out.append(
            f"| {NAMES.get(r['model_key'], r['model_key'])} | {r['result']['prompt_tokens']} | {r['impl']} "
            f"| {r['result'].get('kv_dtype', '–')} | {r['threads']} "
            f"| {fmt(res['prefill_tok_s'])} | {fmt(res['decode_tok_s'])} | {fmt(res['ttft_ms'], 0)} "
            f"| {fmt(res['peak_rss_mb'], 0)} | {fmt(res['load_seconds'], 2)} | {fmt(floor)} | {fmt(pct, 0)}% "
            f"| {r['contended_s']}/{r['samples']} | {r['loadavg_start']:.2f} → {r['loadavg_end']:.2f} |"
        )
    peers = {}
    for r in runs:
        if r["impl"] != "infer":
            res = r["result"]
            extra = f", {res['baseline_rss_mb']:.0f} MB RSS before loading" if "baseline_rss_mb" in res else ""
            peers[r["impl"]] = f"{res.get('reference', r['impl'])}{extra}"
    if peers:
        out.append("")
        out.append("Peers: " + "; ".join(f"{k} = {v}" for k, v in peers.items()) + ".")
    out.append("")
    out.append("Ratios infer / peer (same model; > 1 means infer is faster for tok/s, "
               "larger for TTFT and RSS):")
    out.append("")
    out.append("| model | prompt | peer | infer KV | peer KV | infer threads | peer threads "
               "| prefill | decode | TTFT | peak RSS |")
    out.append("| --- | ---: | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |")
    # One row per (model, prompt length, KV dtype pairing, thread pairing); an infer KV dtype is
    # set against the peer's same dtype when the peer ran it, else against each of the peer's.
    kv = lambda r: r["result"].get("kv_dtype", "–")
    by = {(r["model_key"], r["result"]["prompt_tokens"], r["impl"], kv(r), r["threads"]): r["result"] for r in runs}
    models = list(dict.fromkeys(r["model_key"] for r in runs))
    for m in models:
        for pr in prompts:
            mine = [key for key in by if key[0] == m and key[1] == pr]
            infer_threads = sorted({t for (_, _, im, _, t) in mine if im == "infer"}, reverse=True)
            for peer in dict.fromkeys(im for (_, _, im, _, _) in mine if im != "infer"):
                peer_threads = sorted({t for (_, _, im, _, t) in mine if im == peer}, reverse=True)
                peer_kvs = list(dict.fromkeys(k for (_, _, im, k, _) in mine if im == peer))
                for ikv in dict.fromkeys(k for (_, _, im, k, _) in mine if im == "infer"):
                    for pkv in [ikv] if ikv in peer_kvs else peer_kvs:
                        for it in infer_threads:
                            for pt in peer_threads:
                                if it != pt and it != max(infer_threads):
                                    continue  # infer's other thread counts only against the peer at the same count
                                a, b = by.get((m, pr, "infer", ikv, it)), by.get((m, pr, peer, pkv, pt))
                                if a is None or b is None:
                                    continue
                                out.append(
                                    f"| {NAMES.get(m, m)} | {pr} | {peer} | {ikv} | {pkv} | {it} | {pt} "
                                    f"| {a['prefill_tok_s'] / b['prefill_tok_s']:.2f} "
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
