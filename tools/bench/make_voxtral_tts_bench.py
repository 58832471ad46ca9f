"""A random-weight Voxtral TTS checkpoint of the real shape (Voxtral-4B-TTS-2603: backbone dim 3072,
26 layers, 32 / 8 heads, head_dim 128, hidden 9216, vocab 131072; a 3-layer acoustic transformer; 36
acoustic codebooks; the 1024-dim codec with 4 stages of 2 layers, patch 240) in the real layout,
BF16, for the side-by-side benchmark (tools/bench/voxtral_tts_bench.py). `--shape real4` keeps
every real dimension with 4 backbone layers (~2 GB); `--shape mid` makes a smaller one (dim 1024,
8 layers) to try the tooling.

    PY=$(tools/fixtures/setup_mlx_audio_venv.sh)
    $PY tools/bench/make_voxtral_tts_bench.py [--shape real|real4|mid]   # -> ~/.cache/infer/bench/voxtral-tts-<shape>

Tensors are generated and written one at a time (the real shape is ~8 GB in BF16; holding it in f32
would take 16 GB). The END_AUDIO row of the semantic head is zero, so generation runs to the frame
cap in both implementations. The tokenizer is the fixtures' small tekken.json (ids stay below the
real vocabulary; only the prompt's length differs from a real one).
"""

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import make_voxtral_tts as fx  # noqa: E402

SHAPES = {
    "real": dict(
        backbone=dict(dim=3072, n_layers=26, head_dim=128, hidden_dim=9216, n_heads=32, n_kv_heads=8, rope_theta=1e6),
        acoustic=dict(dim=3072, n_layers=3, head_dim=128, hidden_dim=9216, n_heads=32, n_kv_heads=8),
        semantic_codebook_size=8192,
        n_acoustic_codebook=36,
        codec=dict(
            dim=1024, hidden_dim=4096, head_dim=128, n_heads=8, n_kv_heads=8, semantic_dim=256,
            pretransform_patch_size=240, sampling_rate=24000, lengths="2,2,2,2", kernels="3,4,4,4", strides="1,2,2,2",
        ),
        vocab_size=131072,
    ),
    # The real shape with 4 of the backbone's 26 layers: the same per-layer and per-frame costs in
    # a quarter of the memory (a step's backbone time scales with the layer count; scale it by 26/4).
    "real4": None,
    "mid": dict(
        backbone=dict(dim=1024, n_layers=8, head_dim=128, hidden_dim=3072, n_heads=8, n_kv_heads=2, rope_theta=1e6),
        acoustic=dict(dim=1024, n_layers=3, head_dim=128, hidden_dim=3072, n_heads=8, n_kv_heads=2),
        semantic_codebook_size=8192,
        n_acoustic_codebook=36,
        codec=dict(
            dim=512, hidden_dim=2048, head_dim=64, n_heads=8, n_kv_heads=8, semantic_dim=256,
            pretransform_patch_size=240, sampling_rate=24000, lengths="2,2,2,2", kernels="3,4,4,4", strides="1,2,2,2",
        ),
        vocab_size=32768,
    ),
}
SHAPES["real4"] = dict(SHAPES["real"], backbone=dict(SHAPES["real"]["backbone"], n_layers=4))
VOICES = [("casual_male", 40)]


def bf16_bytes(x: np.ndarray) -> bytes:
    """f32 -> bf16 (round to nearest even), little-endian."""
    u = x.astype(np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=list(SHAPES), default="real")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    s = dict(SHAPES[a.shape], dtype="bfloat16", voices=VOICES, voice_format=["safetensors"], seed=7)
    dst = a.out or Path.home() / f".cache/infer/bench/voxtral-tts-{a.shape}"
    dst.mkdir(parents=True, exist_ok=True)
    params = fx.make_params(s)
    params["vocab_size"] = s["vocab_size"]
    (dst / "params.json").write_text(json.dumps(params, indent=2) + "\n")
    (dst / "tekken.json").write_text(json.dumps(fx.make_tekken(VOICES), ensure_ascii=False) + "\n")

    # Names and shapes from mlx-audio's own module tree (no weights materialised: shapes only).
    model = fx.vt.Model(fx.vt.ModelConfig.from_dict(params))
    entries = [(fx.native_name(k), k, tuple(p.shape)) for k, p in fx.tree_flatten(model.parameters())]
    del model
    header, offset = {}, 0
    for name, _, shape in entries:
        n = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    rng = np.random.default_rng(s["seed"])
    with open(dst / "consolidated.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, key, shape in entries:
            v = fx.random_weights_one(key, shape, rng)
            if name == "acoustic_transformer.semantic_codebook_output.weight":
                v[1] = 0.0  # END_AUDIO never wins: both implementations run to the frame cap
            f.write(bf16_bytes(v))
            print(f"{name} {shape}", file=sys.stderr)
    vdir = dst / "voice_embedding"
    vdir.mkdir(exist_ok=True)
    import mlx.core as mx

    for name, n in VOICES:
        v = mx.array(rng.normal(0, 1.0, (n, params["dim"])).astype(np.float32)).astype(mx.bfloat16)
        mx.save_safetensors(str(vdir / f"{name}.safetensors"), {"embedding": v})
    print(f"wrote {dst} ({offset / 1e9:.2f} GB of weights)")


if __name__ == "__main__":
    main()
