#!/usr/bin/env python3
"""What constrained decoding costs per token: `infer run --json` on the real GGUFs, greedy chat
prompts, with and without each constraint (two JSON Schemas, a regex, a Lark grammar).

    python3 tools/bench/constrained_bench.py [--infer target/release/infer] [--runs 3] [--threads 2]

Prints a markdown table: decode tok/s unconstrained and constrained, the constraint's own time
per generated token (GenerateMetrics.constraint_duration: computing each step's mask and
advancing the matcher) and that time as a share of an unconstrained decode step. Medians over
--runs runs after one warm-up run per case. Run it on an idle machine (tools/bench/idle.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile

MODELS = os.path.expanduser("~/.cache/infer/models")
GGUFS = {
    "gemma-3-270m Q4_K_M": "gemma-3-270m-q4_k_m.gguf",
    "qwen2.5-coder-0.5b Q4_K_M": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "email": {"type": "string", "format": "email"},
        "languages": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
    },
    "required": ["name", "age", "email", "languages"],
    "additionalProperties": False,
}
ORDERS = {
    "type": "array",
    "minItems": 3,
    "items": {
        "type": "object",
        "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
            "quantity": {"type": "integer", "minimum": 1},
            "status": {"enum": ["open", "shipped", "cancelled"]},
        },
        "required": ["sku", "quantity", "status"],
    },
}
SUMS = 'start: expr\nexpr: term ("+" term)*\nterm: NUM | "(" expr ")"\nNUM: /[0-9]+/\n'
CASES = [
    ("person schema", "Describe a fictional programmer as JSON.", ["--json-schema", "person.json"]),
    ("orders schema", "List three orders as a JSON array.", ["--json-schema", "orders.json"]),
    ("regex", "Give a date and a time.", ["--regex", r"[0-9]{4}-[0-9]{2}-[0-9]{2} at [0-9]{2}:[0-9]{2}"]),
    ("Lark sums", "Write a long sum of numbers.", ["--grammar", "sums.lark"]),
]


def run(infer: str, model: str, prompt: str, extra: list[str], threads: int, cwd: str) -> dict:
    cmd = [infer, "--threads", str(threads), "run", "--model", model, "--chat", "--prompt", prompt,
           "--temperature", "0", "--max-tokens", "96", "--json", *extra]
    out = subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["metrics"]


def median_of(infer, model, prompt, extra, args, cwd):
    rows = [run(infer, model, prompt, extra, args.threads, cwd) for _ in range(args.runs + 1)][1:]
    decode = statistics.median(r["decode_tokens_per_sec"] for r in rows)
    per_token = statistics.median(r["constraint_duration"] / max(r["generated_tokens"], 1) for r in rows)
    generated = statistics.median(r["generated_tokens"] for r in rows)
    return decode, per_token, generated


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--infer", default=os.path.expanduser("~/.cache/infer/target/release/infer"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        for name, data in [("person.json", PERSON), ("orders.json", ORDERS)]:
            with open(os.path.join(cwd, name), "w") as f:
                json.dump(data, f)
        with open(os.path.join(cwd, "sums.lark"), "w") as f:
            f.write(SUMS)
        print("| model | constraint | tokens | decode tok/s free | constrained | mask ms/token | share of a step |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for label, file in GGUFS.items():
            model = os.path.join(MODELS, file)
            for case, prompt, extra in CASES:
                free, _, _ = median_of(args.infer, model, prompt, [], args, cwd)
                constrained, per_token, generated = median_of(args.infer, model, prompt, extra, args, cwd)
                share = per_token * free * 100
                print(f"| {label} | {case} | {generated:.0f} | {free:.1f} | {constrained:.1f} | "
                      f"{per_token * 1e3:.2f} | {share:.1f}% |", flush=True)


if __name__ == "__main__":
    main()
