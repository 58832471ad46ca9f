"""Aggregate decode throughput of an OpenAI-compatible server: `streams` concurrent streaming
completions (greedy, `max_tokens` each), one round after a warm-up; prints one JSON line.

    python serve_load.py BASE_URL MODEL STREAMS MAX_TOKENS

Tokens are counted from the usage the server reports at the end of each stream when it does
(stream_options.include_usage), else as content chunks (one per token on both servers here).
`aggregate_tok_s` is every stream's tokens over the round's wall time; `decode_tok_s` leaves out
each stream's first token and the time before the first token of the round, so prefill weighs
less; `ttft_ms` is the mean time to each stream's first token.
"""

import asyncio
import json
import sys
import time

import openai

PROMPTS = [
    "Once upon a time, in a small village by the sea,",
    "def quicksort(arr):",
    "The history of the printing press begins",
    "Here is a list of the planets of the solar system and one fact about each:",
]


async def one(c, model, prompt, max_tokens):
    start = time.perf_counter()
    first, chunks, usage = None, 0, None
    stream = await c.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                        stream=True, stream_options={"include_usage": True})
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
        if chunk.choices and chunk.choices[0].text:
            chunks += 1
            if first is None:
                first = time.perf_counter()
    end = time.perf_counter()
    return {"start": start, "first": first or end, "end": end, "tokens": usage or chunks}


async def round_of(c, model, streams, max_tokens):
    t0 = time.perf_counter()
    rs = await asyncio.gather(*(one(c, model, PROMPTS[i % len(PROMPTS)], max_tokens) for i in range(streams)))
    t1 = time.perf_counter()
    tokens = sum(r["tokens"] for r in rs)
    first = min(r["first"] for r in rs)
    return {
        "streams": streams,
        "tokens": tokens,
        "seconds": t1 - t0,
        "aggregate_tok_s": tokens / (t1 - t0),
        "decode_tok_s": (tokens - len(rs)) / max(t1 - first, 1e-9),
        "ttft_ms": 1000 * sum(r["first"] - r["start"] for r in rs) / len(rs),
    }


async def main():
    base, model, streams, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    c = openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0, timeout=1800)
    await round_of(c, model, 1, 8)  # warm-up: first-touch of weights and pools
    print(json.dumps(await round_of(c, model, streams, max_tokens)))


asyncio.run(main())
