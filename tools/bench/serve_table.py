"""Markdown table of tools/bench/serve.sh's results: lines `model|impl|json` on stdin."""

import json
import sys

TITLE = {"gemma": "Gemma 3 270M Q4_K_M", "qwen": "Qwen2.5-Coder 0.5B Q4_K_M"}
max_tokens, parallel, threads = sys.argv[1:4]
rows = {}
for line in sys.stdin:
    if line.strip():
        k, impl, r = line.split("|", 2)
        r = json.loads(r)
        rows[(k, impl, r["streams"])] = r

print(f"{max_tokens} tokens per stream, greedy; infer --parallel {parallel}, llama.cpp --n_threads {threads}.\n")
print("| model | streams | infer tok/s | llama.cpp tok/s | infer / llama.cpp | infer × one stream "
      "| infer decode tok/s | llama.cpp decode tok/s | infer TTFT ms | llama.cpp TTFT ms |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for k in TITLE:
    counts = sorted({n for (m, _, n) in rows if m == k})
    for n in counts:
        i, l = rows.get((k, "infer", n)), rows.get((k, "llama.cpp", n))
        one = rows.get((k, "infer", counts[0]))
        f = lambda r, key, fmt="{:.1f}": fmt.format(r[key]) if r else "–"
        ratio = f"{i['aggregate_tok_s'] / l['aggregate_tok_s']:.2f}" if i and l else "–"
        scale = f"{i['aggregate_tok_s'] / one['aggregate_tok_s']:.2f}" if i and one else "–"
        print(f"| {TITLE[k] if n == counts[0] else ''} | {n} | **{f(i, 'aggregate_tok_s')}** | {f(l, 'aggregate_tok_s')} "
              f"| {ratio} | {scale} | {f(i, 'decode_tok_s')} | {f(l, 'decode_tok_s')} "
              f"| {f(i, 'ttft_ms', '{:.0f}')} | {f(l, 'ttft_ms', '{:.0f}')} |")
