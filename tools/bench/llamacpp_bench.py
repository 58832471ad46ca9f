#!/usr/bin/env python3
"""llama.cpp (llama-cpp-python) counterpart of `infer bench --json`: one model, one thread count.

    ~/.cache/infer/venvs/llamacpp/bin/python tools/bench/llamacpp_bench.py MODEL.gguf \
        [--threads 2] [--prompt-tokens 128] [--gen-tokens 64] [--runs 3] [--kv-dtype f16]

Prints one JSON object with the same keys as `infer bench --json` (prefill_tok_s, decode_tok_s,
ttft_ms, peak_rss_mb, load_seconds; medians over --runs timed runs after one warm-up run).
Run it in a fresh process per model: peak_rss_mb is this process's ru_maxrss.

What is timed, mirroring infer's GenerateMetrics (core/src/text/engine.rs):
- prompt: the same ids `infer bench` uses (1000 + (i*7) % 500, no BOS), so both evaluate the same
  sequence;
- prefill: llm.eval(prompt) (one llama_decode of the prompt batch, logits for the last position
  only) until the last-position logits are readable; prefill_tok_s = prompt_tokens / that time;
- ttft: prefill + greedy pick of the first token (argmax over the last-position logits);
- decode: the remaining gen_tokens-1 steps, each llm.eval([token]) + greedy argmax, timed from the
  end of prefill to the last token; decode_tok_s = (gen_tokens - 1) / that time (infer divides the
  same token count by the same span). EOS is ignored, as in infer bench.
Greedy = numpy argmax over llama_get_logits_ith(ctx, -1) (no llama.cpp sampler chain, no Python
generator overhead: this is the raw eval loop, the fastest way to drive llama-cpp-python).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from importlib.metadata import version

import numpy as np

import llama_cpp
from llama_cpp import Llama


# ggml_type ids of the KV cache types (llama_cpp.GGML_TYPE_F32, GGML_TYPE_F16).
KV_TYPES = {"f32": llama_cpp.GGML_TYPE_F32, "f16": llama_cpp.GGML_TYPE_F16}


def rss_mb() -> float:
    # Linux: ru_maxrss in KiB; infer reports VmHWM (KiB) * 1024 / 1e6, so do the same.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n-ctx", type=int, default=0, help="default: prompt + gen rounded up to 256")
    ap.add_argument("--kv-dtype", choices=sorted(KV_TYPES), default="f16",
                    help="KV cache storage type (llama.cpp's default: f16)")
    args = ap.parse_args()
    if args.runs < 1 or args.prompt_tokens < 1 or args.gen_tokens < 2:
        ap.error("need --runs >= 1, --prompt-tokens >= 1, --gen-tokens >= 2")

    baseline_rss = rss_mb()  # interpreter + numpy + libllama, before the model
    n_ctx = args.n_ctx or -(-(args.prompt_tokens + args.gen_tokens) // 256) * 256
    t0 = time.perf_counter()
    llm = Llama(
        model_path=args.model,
        n_ctx=n_ctx,
        n_batch=max(512, args.prompt_tokens),
        n_ubatch=max(512, args.prompt_tokens),
        n_threads=args.threads,
        n_threads_batch=args.threads,
        logits_all=False,
        type_k=KV_TYPES[args.kv_dtype],
        type_v=KV_TYPES[args.kv_dtype],
        verbose=False,
    )
    load_s = time.perf_counter() - t0
    n_vocab = llm.n_vocab()
    ctx = llm.ctx

    def greedy() -> int:
        ptr = llama_cpp.llama_get_logits_ith(ctx, -1)  # synchronizes with the decode
        return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(n_vocab,))))

    prompt = [min(1000, n_vocab // 2) + (i * 7) % 500 for i in range(args.prompt_tokens)]
    prefill, decode, ttft = [], [], []
    first_run_ids = None
    for run in range(args.runs + 1):
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)
        llama_cpp.llama_get_logits_ith(ctx, -1)
        t_prefill = time.perf_counter()
        tok = greedy()
        t_first = time.perf_counter()
        ids = [tok]
        for _ in range(args.gen_tokens - 1):
            llm.eval([tok])
            tok = greedy()
            ids.append(tok)
        end = time.perf_counter()
        if run == 0:
            first_run_ids = ids
            continue  # warm-up
        if ids != first_run_ids:
            print(f"warning: run {run} generated different ids than the warm-up", file=sys.stderr)
        prefill.append(args.prompt_tokens / (t_prefill - start))
        ttft.append((t_first - start) * 1e3)
        decode.append((args.gen_tokens - 1) / (end - t_prefill))

    print(json.dumps({
        "impl": "llama.cpp",
        "reference": f"llama-cpp-python {version('llama_cpp_python')}",
        "model": os.path.abspath(args.model),
        "threads": args.threads,
        "n_ctx": n_ctx,
        "kv_dtype": args.kv_dtype,
        # llama-cpp-python's default; the attention runs as separate ggml ops (no fused kernel).
        "flash_attn": False,
        "prompt_tokens": args.prompt_tokens,
        "gen_tokens": args.gen_tokens,
        "runs": args.runs,
        "load_seconds": load_s,
        "prefill_tok_s": statistics.median(prefill),
        "decode_tok_s": statistics.median(decode),
        "ttft_ms": statistics.median(ttft),
        "peak_rss_mb": rss_mb(),
        "baseline_rss_mb": baseline_rss,
        "all_prefill_tok_s": prefill,
        "all_decode_tok_s": decode,
        "generated_ids_head": first_run_ids[:8],
    }))


if __name__ == "__main__":
    main()
