#!/usr/bin/env python3
"""A random-weight bf16 Qwen3 checkpoint with the real Qwen3-0.6B shapes, for benchmarks only.

    HF_HUB_OFFLINE=1 ~/.cache/infer/venvs/transformers/bin/python tools/bench/make_qwen3_bench.py [OUT]

OUT defaults to ~/.cache/infer/models/qwen3-0.6b-random (never the repository: ~1.2 GB). Run it in
the venv of tools/fixtures/setup_venv.sh (transformers 5.23.0, torch 2.13.0); nothing is downloaded.

The model is `Qwen3ForCausalLM(Qwen3Config(...))` with Qwen3-0.6B's published shapes (28 layers,
hidden 1024, MLP 3072, 16 query / 8 KV heads of 128, vocab 151936, tied embeddings, RoPE theta 1e6,
40960 positions), initialized by transformers itself after `torch.manual_seed(0)` (normal(0, 0.02)
matrices, RMSNorm weights 1.0), cast to bf16 and saved with `save_pretrained` (one
model.safetensors of 596 M parameters = 1.19 GB). The tokenizer is the tiny trained BPE of the
Qwen3 test fixture (tests/fixtures/qwen3/bf16: 483 tokens): the benchmarks feed token ids directly
(1000 + (i*7) % 500) and never detokenize meaningfully, so its size does not matter. config.json has
no bos/eos ids, so nothing stops generation early either way.

Deterministic: the same versions and seed give byte-identical weights (the script prints the
sha256 of model.safetensors; docs/benchmarks.md records it). `INFER_BENCH_ANY_VERSION=1` accepts
other torch/transformers versions (a GPU machine's own, for tools/gpu_check.sh): the shapes are the
same, the random values are not the recorded ones.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402

TORCH_VERSION = "2.13.0"
TRANSFORMERS_VERSION = "5.23.0"
SEED = 0
REPO = Path(__file__).resolve().parents[2]
TOKENIZER_FROM = REPO / "tests" / "fixtures" / "qwen3" / "bf16"
DEFAULT_OUT = Path.home() / ".cache" / "infer" / "models" / "qwen3-0.6b-random"

# Qwen/Qwen3-0.6B config.json, shape and RoPE fields.
QWEN3_0_6B = dict(
    vocab_size=151936,
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=40960,
    rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    tie_word_embeddings=True,
    attention_bias=False,
    hidden_act="silu",
)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def main() -> None:
    pinned = torch.__version__.split("+")[0] == TORCH_VERSION and transformers.__version__ == TRANSFORMERS_VERSION
    if not pinned and os.environ.get("INFER_BENCH_ANY_VERSION") != "1":
        sys.exit(f"need torch {TORCH_VERSION} + transformers {TRANSFORMERS_VERSION} "
                 f"(tools/fixtures/setup_venv.sh), have {torch.__version__} + {transformers.__version__}")
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    config = Qwen3Config(**QWEN3_0_6B)
    torch.manual_seed(SEED)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16).eval()
    model.save_pretrained(out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(TOKENIZER_FROM / name, out / name)

    n_params = sum(p.numel() for p in model.parameters())  # tied: the embedding counted once
    st = out / "model.safetensors"
    print(f"{out}: {n_params / 1e6:.1f} M parameters, model.safetensors {st.stat().st_size / 1e9:.3f} GB, "
          f"sha256 {sha256(st)}")


if __name__ == "__main__":
    main()
