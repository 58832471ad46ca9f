"""A random-weight Voxtral Realtime checkpoint of the real shape (Voxtral-Mini-4B-Realtime-2602:
encoder dim 1280, 32 layers, 32 heads of 64, FFN 5120, window 750; decoder dim 3072, 26 layers,
32 / 8 heads of 128, FFN 9216, window 8192, vocab 131072, tied head; ~4.4 B parameters) in the
Hugging Face layout, stored BF16 (~8.9 GB), for the side-by-side benchmark
(tools/bench/voxtral_realtime_bench.py). transformers and infer both load it.

    tools/fixtures/setup_venv.sh
    ~/.cache/infer/venvs/transformers/bin/python tools/bench/make_voxtral_realtime_bench.py
        # -> ~/.cache/infer/bench/voxtral-realtime-4b

The dimensions are transformers 5.23's `VoxtralRealtimeConfig()` defaults, which are the released
model's (asserted below). Tensor names and shapes come from transformers' own module tree built on
the meta device (no weights materialised); each tensor is drawn and written in bf16 a slab at a
time, so the writer never holds more than ~200 MB. The tokenizer is mistral-common's real
tekken_240911.json vocabulary (130072 regular tokens + 1000 specials = the model's 131072) in the
newer tekken format Voxtral Realtime ships: its special tokens at their real ids and the `audio`
section (480 ms delay). The `</s>` row of the tied embedding is zero, so its logit is always 0 and
greedy decoding never stops early: both implementations decode every position of the audio.
"""

import argparse
import json
import math
import os
import struct
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from transformers import (
    GenerationConfig,
    MistralCommonBackend,
    VoxtralRealtimeConfig,
    VoxtralRealtimeFeatureExtractor,
    VoxtralRealtimeForConditionalGeneration,
    VoxtralRealtimeProcessor,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import make_voxtral_realtime as fx  # noqa: E402

NUM_SPECIAL = 1000
VOCAB = 131072
EOS = 2
# The released model's encoder RoPE base (params.json `rope_theta` of the whisper encoder).
ROPE = {"rope_type": "default", "rope_theta": 1_000_000.0}
REAL = dict(
    encoder=dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=32,
                 head_dim=64, sliding_window=750),
    decoder=dict(hidden_size=3072, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=128, sliding_window=8192, vocab_size=VOCAB),
)
SLAB = 1 << 25  # elements drawn at a time (128 MB of f32)


def bf16_bytes(x: np.ndarray) -> bytes:
    """f32 -> bf16 (round to nearest even), little-endian."""
    u = x.astype(np.float32, copy=False).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).tobytes()


def stored_name(name: str) -> str:
    """transformers' in-memory parameter name -> the name `save_pretrained` writes."""
    if name.startswith("model.language_model."):
        return "language_model.model." + name[len("model.language_model.") :]
    if name.startswith("model."):
        return name[len("model.") :]
    raise KeyError(name)


def draw(name: str, shape, rng, std: float):
    """Yields the tensor's values in row slabs (f32), as the fixture initialises them."""
    n = math.prod(shape)
    row = math.prod(shape[1:]) if len(shape) > 1 else n
    rows_per = max(1, SLAB // row)
    rows = shape[0] if len(shape) > 1 else 1
    for r0 in range(0, rows, rows_per):
        k = min(rows_per, rows - r0) * row
        if "norm" in name and name.endswith("weight") and len(shape) == 1:
            v = rng.uniform(0.5, 1.5, k).astype(np.float32)
        elif name.endswith("bias"):
            v = 0.2 * rng.standard_normal(k, dtype=np.float32)
        elif "ada_rms_norm" in name:
            v = 0.3 * rng.standard_normal(k, dtype=np.float32)
        else:
            v = std * rng.standard_normal(k, dtype=np.float32)
        if name == "language_model.model.embed_tokens.weight" and r0 <= EOS < r0 + k // row:
            v.reshape(-1, row)[EOS - r0] = 0.0  # `</s>` never wins: no early stop
        yield v


def write_tekken(path: Path):
    """The real tekken_240911 vocabulary in Voxtral Realtime's tekken format."""
    import mistral_common
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    src = json.loads((Path(mistral_common.__file__).parent / "data" / "tekken_240911.json").read_text())
    regular = VOCAB - NUM_SPECIAL
    specials = [
        {"rank": i, "token_str": fx.SPECIAL_NAMES.get(i, f"<SPECIAL_{i}>"), "is_control": True} for i in range(NUM_SPECIAL)
    ]
    tekken = {
        "config": {
            "pattern": src["config"]["pattern"],
            "num_vocab_tokens": regular,
            "default_vocab_size": VOCAB,
            "default_num_special_tokens": NUM_SPECIAL,
            "version": "v7",
        },
        "vocab": src["vocab"][:regular],
        "special_tokens": specials,
        "audio": fx.AUDIO_SECTION,
    }
    path.write_text(json.dumps(tekken, ensure_ascii=False))
    enc = MistralTokenizer.from_file(str(path)).instruct_tokenizer.audio_encoder
    assert enc is not None and enc.special_ids.streaming_pad == 32, enc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache/infer/bench/voxtral-realtime-4b")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    dst = a.out
    dst.mkdir(parents=True, exist_ok=True)

    # The defaults are the released model's dimensions; say so loudly if a version changes them.
    default = VoxtralRealtimeConfig()
    for key, want in REAL["encoder"].items():
        assert getattr(default.audio_config, key) == want, (key, getattr(default.audio_config, key), want)
    for key, want in REAL["decoder"].items():
        assert getattr(default.text_config, key) == want, (key, getattr(default.text_config, key), want)
    cfg = VoxtralRealtimeConfig(
        audio_config={**REAL["encoder"], "rope_parameters": ROPE},
        text_config={**REAL["decoder"], "rope_parameters": ROPE, "tie_word_embeddings": True},
    )
    cfg.dtype = "bfloat16"
    with torch.device("meta"):
        model = VoxtralRealtimeForConditionalGeneration(cfg)
    std = cfg.text_config.initializer_range
    entries = [(stored_name(k), tuple(p.shape)) for k, p in model.state_dict().items() if k != "lm_head.weight"]
    del model

    cfg.save_pretrained(str(dst))
    GenerationConfig(bos_token_id=1, eos_token_id=EOS, pad_token_id=11).save_pretrained(str(dst))
    write_tekken(dst / "tekken.json")
    processor = VoxtralRealtimeProcessor(
        feature_extractor=VoxtralRealtimeFeatureExtractor(),
        tokenizer=MistralCommonBackend(tokenizer_path=str(dst / "tekken.json")),
    )
    processor.save_pretrained(str(dst))

    header, offset = {}, 0
    for name, shape in entries:
        n = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    rng = np.random.default_rng(a.seed)
    tmp = dst / "model.safetensors.partial"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, shape in entries:
            for v in draw(name, shape, rng, std):
                f.write(bf16_bytes(v))
            print(f"{name} {shape}", file=sys.stderr)
    tmp.rename(dst / "model.safetensors")
    params = sum(math.prod(s) for _, s in entries)
    print(f"wrote {dst}: {params / 1e9:.3f} B parameters, {offset / 1e9:.2f} GB of BF16 weights")


if __name__ == "__main__":
    main()
