#!/usr/bin/env python3
"""HF transformers (PyTorch, CPU or CUDA) counterpart of `infer bench --json`: one checkpoint, one
thread count.

    ~/.cache/infer/venvs/transformers/bin/python tools/bench/transformers_bench.py MODEL_DIR \
        [--threads 2] [--dtype bf16] [--prompt-tokens 128] [--gen-tokens 64] [--runs 3] [--device cuda]

Prints one JSON object with the same keys as `infer bench --json` and tools/bench/llamacpp_bench.py
(prefill_tok_s, decode_tok_s, ttft_ms, peak_rss_mb, load_seconds; medians over --runs timed runs
after one warm-up run). Run it in a fresh process per checkpoint and thread count: peak_rss_mb is
this process's ru_maxrss (interpreter, torch and transformers included; baseline_rss_mb is the
figure after the imports, before the model).

What is timed, mirroring infer's GenerateMetrics (core/src/text/engine.rs):
- load: `AutoModelForCausalLM.from_pretrained(dir, dtype=...)` (weights kept in that dtype; the
  default attention implementation, sdpa), after `torch.set_num_threads(threads)`;
- prompt: the ids `infer bench` uses (min(1000, vocab/2) + (i*7) % 500, no BOS);
- prefill: one forward of the whole prompt with a fresh cache (use_cache=True, logits for the last
  position only via logits_to_keep=1, as infer and generate() do) until those logits exist (CPU
  ops are synchronous); prefill_tok_s = prompt_tokens / that time;
- ttft: prefill + greedy pick of the first token (argmax over the last-position logits);
- decode: the remaining gen_tokens-1 steps, each a one-token forward with past_key_values +
  argmax, timed from the end of prefill to the last token; decode_tok_s = (gen_tokens - 1) / that
  time (infer divides the same token count by the same span). EOS is ignored.
Everything runs under torch.inference_mode(). With `--device cuda` the model and ids live on the
GPU, the prefill time ends at a `torch.cuda.synchronize()` (kernels are asynchronous there), each
step's argmax reads the id back (infer reads the last position's logits back and picks on the host,
a little more work per step) and gpu_peak_mb is torch's peak allocation. This is the raw forward
loop (no generate(), no logits processors), the fastest way to drive transformers eagerly.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def rss_mb() -> float:
    # Linux: ru_maxrss in KiB; infer reports VmHWM (KiB) * 1024 / 1e6, so do the same.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a Hugging Face model folder (config.json + safetensors)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N")
    args = ap.parse_args()
    if args.runs < 1 or args.prompt_tokens < 1 or args.gen_tokens < 2 or args.threads < 1:
        ap.error("need --runs >= 1, --prompt-tokens >= 1, --gen-tokens >= 2, --threads >= 1")
    device = torch.device(args.device)
    cuda = device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    baseline_rss = rss_mb()  # interpreter + torch + transformers, before the model
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=DTYPES[args.dtype]).to(device)
    model.eval()
    sync()
    load_s = time.perf_counter() - t0
    weight_dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
    vocab = model.config.vocab_size

    prompt = torch.tensor([[min(1000, vocab // 2) + (i * 7) % 500 for i in range(args.prompt_tokens)]],
                          device=device)
    prefill, decode, ttft = [], [], []
    first_run_ids = None
    with torch.inference_mode():
        for run in range(args.runs + 1):
            start = time.perf_counter()
            out = model(input_ids=prompt, use_cache=True, logits_to_keep=1)
            logits = out.logits[0, -1]
            sync()
            t_prefill = time.perf_counter()
            tok = int(torch.argmax(logits))
            t_first = time.perf_counter()
            past = out.past_key_values
            ids = [tok]
            for _ in range(args.gen_tokens - 1):
                out = model(input_ids=torch.tensor([[tok]], device=device), past_key_values=past, use_cache=True)
                past = out.past_key_values
                tok = int(torch.argmax(out.logits[0, -1]))
                ids.append(tok)
            end = time.perf_counter()
            del out, past
            if run == 0:
                first_run_ids = ids
                continue  # warm-up: first touches, oneDNN primitive creation
            if ids != first_run_ids:
                print(f"warning: run {run} generated different ids than the warm-up", file=sys.stderr)
            prefill.append(args.prompt_tokens / (t_prefill - start))
            ttft.append((t_first - start) * 1e3)
            decode.append((args.gen_tokens - 1) / (end - t_prefill))

    print(json.dumps({
        "impl": "transformers",
        "reference": f"transformers {transformers.__version__} / torch {torch.__version__}",
        "model": os.path.abspath(args.model),
        "threads": args.threads,
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "attn_implementation": model.config._attn_implementation,
        "dtype": args.dtype,
        "weight_dtypes": weight_dtypes,
        "prompt_tokens": args.prompt_tokens,
        "gen_tokens": args.gen_tokens,
        "runs": args.runs,
        "load_seconds": load_s,
        "prefill_tok_s": statistics.median(prefill),
        "decode_tok_s": statistics.median(decode),
        "ttft_ms": statistics.median(ttft),
        "peak_rss_mb": rss_mb(),
        "baseline_rss_mb": baseline_rss,
        "device": str(device),
        "gpu_peak_mb": torch.cuda.max_memory_allocated(device) / 1e6 if cuda else None,
        "all_prefill_tok_s": prefill,
        "all_decode_tok_s": decode,
        "generated_ids_head": first_run_ids[:8],
    }))


if __name__ == "__main__":
    main()
