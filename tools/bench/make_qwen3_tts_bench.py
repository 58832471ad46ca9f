#!/usr/bin/env python3
"""A random Qwen3-TTS checkpoint with the real Qwen3-TTS-12Hz-0.6B-Base shapes, for speed and
memory measurements (tools/bench/tts_compare.sh). Written by the official reference.

    ~/.cache/infer/venvs/qwen-tts/bin/python tools/bench/make_qwen3_tts_bench.py [OUT]

OUT defaults to ~/.cache/infer/bench/qwen3-tts-0.6b-random (never the repository: ~2.5 GB).
Pinned: qwen-tts 0.1.1, transformers 4.57.3, torch 2.11.0 (the venv of
tools/fixtures/setup_qwen_tts_venv.sh).

What it writes (the Hugging Face layout of Qwen3-TTS-12Hz-0.6B-Base):
- config.json + model.safetensors: talker 28 layers x 1024 (16 heads / 8 kv heads, head_dim 128,
  MLP 3072, codec vocab 3072, text embedding 151936 x 2048), code predictor 5 layers x 1024
  (2048-entry sub-codebooks, 16 code groups), speaker encoder with the default (real) sizes; the
  real special ids (codec eos 2150, think 2154/2155/2156/2157, pad 2148, bos 2149, languages,
  im_start 151644, im_end 151645, tts_pad 151671, tts_bos 151672, tts_eos 151673). Stored bf16
  like the released file.
- EOS is made unreachable under greedy decoding: the codec head's EOS row is zeroed, so its logit
  is 0 while the best of the 2048 code logits is positive. Both implementations therefore generate
  exactly the requested number of frames, and the timings compare equal work.
- speech_tokenizer/: a random codec with the released Qwen3-TTS-Tokenizer-12Hz sizes
  (`real_shape_config()` of tools/fixtures/make_qwen3_tts_codec.py: Mimi-default encoder,
  8-layer 512-wide decoder transformer, decoder_dim 1536), f32 like the released file.
- Tokenizer: the tiny byte-level BPE of tests/fixtures/qwen3-tts/small (vocab.json, merges.txt;
  408 entries) with the six special tokens moved to the real Qwen ids (<|endoftext|> 151643,
  <|im_start|> 151644, <|im_end|> 151645, <tts_pad> 151671, <tts_text_bos> 151672,
  <tts_text_eod> 151673). They are entries of vocab.json itself *and* of tokenizer_config.json's
  added_tokens_decoder with the same ids, so transformers' Qwen2TokenizerFast and infer's
  vocab.json + merges.txt loader cannot disagree about them (a gap-free vocabulary would let a
  fast tokenizer renumber added tokens). The script checks the ids it gets.
- generation_config.json: the fixture's.

It also writes ~/.cache/infer/bench/qwen3-tts-tiny: a copy of tests/fixtures/qwen3-tts/small (the
"tiny" benchmark checkpoint: talker 2 x 32, code predictor 2 x 32, tiny codec) with the same EOS
treatment (the fixture's EOS row is boosted so its goldens end early).
"""

import json
import os
import shutil
import sys
import time
from importlib.metadata import version
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import Qwen2TokenizerFast

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "fixtures"))

from make_qwen3_tts import LANGUAGES, randomize  # noqa: E402
from make_qwen3_tts_codec import randomize as randomize_codec, real_shape_config  # noqa: E402
from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration  # noqa: E402
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model  # noqa: E402

PINS = {"qwen-tts": "0.1.1", "transformers": "4.57.3", "torch": "2.11.0"}
TINY = ROOT / "tests" / "fixtures" / "qwen3-tts" / "small"
DEFAULT_OUT = Path.home() / ".cache" / "infer" / "bench" / "qwen3-tts-0.6b-random"
TINY_OUT = Path.home() / ".cache" / "infer" / "bench" / "qwen3-tts-tiny"
SPECIALS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<tts_pad>": 151671,
    "<tts_text_bos>": 151672,
    "<tts_text_eod>": 151673,
}
TEXT_VOCAB = 151936
EOS = 2150


def check_pins() -> None:
    for pkg, want in PINS.items():
        have = version(pkg).split("+")[0]
        if have != want:
            sys.exit(f"{pkg} {have} installed, this script is pinned to {want}")


def write_tokenizer(out: Path) -> None:
    vocab = json.loads((TINY / "vocab.json").read_text())
    cfg = json.loads((TINY / "tokenizer_config.json").read_text())
    old = {tok["content"]: int(i) for i, tok in cfg["added_tokens_decoder"].items()}
    assert set(old) == set(SPECIALS), old
    for name in SPECIALS:
        vocab.pop(name, None)
    assert max(vocab.values()) < min(SPECIALS.values())
    vocab.update(SPECIALS)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    shutil.copy(TINY / "merges.txt", out / "merges.txt")
    cfg["added_tokens_decoder"] = {
        str(SPECIALS[tok["content"]]): tok for tok in cfg["added_tokens_decoder"].values()
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))

    tok = Qwen2TokenizerFast.from_pretrained(str(out))
    ids = tok("<|im_start|>assistant\nHello world.<|im_end|>\n<tts_pad><tts_text_bos><tts_text_eod>")["input_ids"]
    for name, i in SPECIALS.items():
        if name != "<|endoftext|>" and i not in ids:
            sys.exit(f"tokenizer check failed: {name} is not id {i} in {ids}")
    print(f"tokenizer: {len(vocab)} entries, specials at the real ids; sample ids {ids}", file=sys.stderr)


def write_tiny(out: Path) -> None:
    from safetensors.torch import load_file, save_file

    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(TINY, out, ignore=shutil.ignore_patterns("goldens.json", "golden.*"))
    path = out / "model.safetensors"
    tensors = load_file(str(path))
    tensors["talker.codec_head.weight"][EOS].zero_()
    save_file(tensors, str(path), metadata={"format": "pt"})
    print(f"wrote {out}")


def config() -> Qwen3TTSConfig:
    return Qwen3TTSConfig(
        talker_config=dict(
            vocab_size=3072,
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            hidden_act="silu",
            max_position_embeddings=32768,
            rope_theta=1000000.0,
            rope_scaling={"interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default", "type": "default"},
            rms_norm_eps=1e-6,
            num_code_groups=16,
            text_hidden_size=2048,
            text_vocab_size=TEXT_VOCAB,
            codec_eos_token_id=EOS,
            codec_think_id=2154,
            codec_nothink_id=2155,
            codec_think_bos_id=2156,
            codec_think_eos_id=2157,
            codec_pad_id=2148,
            codec_bos_id=2149,
            codec_language_id=LANGUAGES,
            spk_id={},
            spk_is_dialect={},
            code_predictor_config=dict(
                vocab_size=2048,
                hidden_size=1024,
                intermediate_size=3072,
                num_hidden_layers=5,
                num_attention_heads=16,
                num_key_value_heads=8,
                head_dim=128,
                hidden_act="silu",
                max_position_embeddings=65536,
                rope_theta=1000000.0,
                rms_norm_eps=1e-6,
                num_code_groups=16,
            ),
        ),
        speaker_encoder_config=dict(enc_dim=1024, sample_rate=24000),
        tokenizer_type="qwen3_tts_tokenizer_12hz",
        tts_model_size="0b6",
        tts_model_type="base",
        im_start_token_id=SPECIALS["<|im_start|>"],
        im_end_token_id=SPECIALS["<|im_end|>"],
        tts_pad_token_id=SPECIALS["<tts_pad>"],
        tts_bos_token_id=SPECIALS["<tts_text_bos>"],
        tts_eos_token_id=SPECIALS["<tts_text_eod>"],
    )


def main() -> None:
    check_pins()
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    if ROOT in out.resolve().parents:
        sys.exit("write the benchmark checkpoint outside the repository")
    out.mkdir(parents=True, exist_ok=True)
    write_tiny(TINY_OUT)
    write_tokenizer(out)

    t0 = time.time()
    torch.manual_seed(0)
    model = Qwen3TTSForConditionalGeneration(config()).eval()
    randomize(model, seed=2024)
    with torch.no_grad():
        model.talker.codec_head.weight[EOS].zero_()
    params = sum(p.numel() for p in model.parameters())
    model.to(torch.bfloat16).save_pretrained(str(out), safe_serialization=True)
    del model
    # After save_pretrained, which writes its own generation_config.json.
    shutil.copy(TINY / "generation_config.json", out / "generation_config.json")
    print(f"model: {params / 1e6:.1f} M parameters, bf16, {time.time() - t0:.0f} s", file=sys.stderr)

    t0 = time.time()
    codec = Qwen3TTSTokenizerV2Model(real_shape_config()).eval()
    randomize_codec(codec, seed=7)
    codec.save_pretrained(str(out / "speech_tokenizer"), safe_serialization=True)
    params = sum(p.numel() for p in codec.parameters())
    print(f"codec: {params / 1e6:.1f} M parameters, f32, {time.time() - t0:.0f} s", file=sys.stderr)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
