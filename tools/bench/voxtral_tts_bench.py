#!/usr/bin/env python3
"""Voxtral TTS: infer vs mlx-audio 0.6.2 (CPU) on the same checkpoint, one side per call; prints one
JSON object (median over runs).

    PY=$(tools/fixtures/setup_mlx_audio_venv.sh)
    $PY tools/bench/voxtral_tts_bench.py ref ~/.cache/infer/bench/voxtral-tts-real --frames 25 --runs 2 [--dtype bf16]
    python3 tools/bench/voxtral_tts_bench.py infer ~/.cache/infer/bench/voxtral-tts-real --infer ./infer \\
        --frames 25 --runs 2 [--dtype bf16]

ref: mlx-audio's `Model.generate` (greedy semantic codes, flow matching, codec decode of all frames)
on a view of the checkpoint with config.json = params.json, after a 2-frame warm-up; load time
apart; the codec's share is timed by decoding the same codes again. Peak RSS: ru_maxrss.
infer: a fresh `infer speak` per run with INFER_LOG=infer_voxtral_tts=debug; the split (prefill,
backbone steps, flow matching, codec) comes from its timing line; with --stream-frames N it
streams (`--stream --stream-frames N`) and first_audio_s is the time to the first chunk. Both
make exactly --frames frames (the checkpoint's END_AUDIO row is zero).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEXT = "The quick brown fox jumps over the lazy dog."
VOICE = "casual_male"


def run_ref(a) -> dict:
    import mlx.core as mx
    from mlx_audio.tts.utils import load_model

    with tempfile.TemporaryDirectory() as tmp:
        view = Path(tmp) / "view"
        view.mkdir()
        shutil.copy(a.checkpoint / "params.json", view / "config.json")
        for f in ["consolidated.safetensors", "tekken.json", "voice_embedding"]:
            os.symlink(a.checkpoint / f, view / f)
        t0 = time.perf_counter()
        model = load_model(view, strict=True, model_type="voxtral_tts")
        if a.dtype == "f32":
            # The same compute dtype as infer's default (weights upcast once, as infer does).
            from mlx.utils import tree_map

            model.update(tree_map(lambda p: p.astype(mx.float32), model.parameters()))
            mx.eval(model.parameters())
        load_s = time.perf_counter() - t0
        list(model.generate(text=TEXT, voice=VOICE, max_tokens=2))
        synth, audio, codec = [], [], []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            res = list(model.generate(text=TEXT, voice=VOICE, max_tokens=a.frames))
            mx.eval(res[-1].audio)
            synth.append(time.perf_counter() - t0)
            audio.append(res[-1].audio.shape[0] / model.sample_rate)
            codes = mx.array(
                [[[2] + [12] * model.config.n_acoustic_codebook] * a.frames], dtype=mx.int32
            )
            t1 = time.perf_counter()
            mx.eval(model.audio_tokenizer.decode(codes))
            codec.append(time.perf_counter() - t1)
    return {
        "impl": "mlx-audio",
        "dtype": a.dtype,
        "frames": a.frames,
        "synth_s": statistics.median(synth),
        "audio_s": statistics.median(audio),
        "codec_s": statistics.median(codec),
        "load_s": load_s,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def run_infer(a) -> dict:
    synth, audio, split, rss, wall, first = [], [], [], [], [], []
    env = dict(os.environ, INFER_LOG="infer_voxtral_tts=debug", CANDLE_NUM_THREADS=str(a.threads),
               RAYON_NUM_THREADS=str(a.threads))
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.runs):
            cmd = [a.infer, "speak", "--model", str(a.checkpoint), "--voice", VOICE, "--text", TEXT,
                   "--temperature", "0", "--seed", "1", "--max-frames", str(a.frames), "--dtype", a.dtype,
                   "--out", f"{tmp}/out.wav"]
            if a.stream_frames > 0:
                cmd += ["--stream", "--stream-frames", str(a.stream_frames)]
            if a.quant:
                cmd += ["--quant", a.quant]
            t0 = time.perf_counter()
            p = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
            _, err = p.communicate()
            err = re.sub(r"\x1b\[[0-9;]*m", "", err)  # tracing's colours
            wall.append(time.perf_counter() - t0)
            if p.returncode != 0:
                sys.exit(f"infer failed: {err}")
            m = re.search(r"(\d+\.\d+) s of audio, (\d+) frames in (\d+\.\d+) s", err)
            synth.append(float(m.group(3)))
            first.append(float(re.search(r"first audio after (\d+\.\d+) s", err).group(1)))
            audio.append(float(m.group(1)))
            t = dict(re.findall(r"(\w+_s)=([\d.e-]+)", err.split("voxtral-tts timing")[-1].splitlines()[0]))
            split.append({k: float(v) for k, v in t.items()})
            rss.append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
    med = lambda k: statistics.median(s.get(k, 0.0) for s in split)  # noqa: E731
    return {
        "impl": "infer",
        "dtype": a.dtype,
        "quant": a.quant,
        "frames": a.frames,
        "synth_s": statistics.median(synth),
        "audio_s": statistics.median(audio),
        "stream_frames": a.stream_frames,
        "first_audio_s": statistics.median(first),
        "prefill_s": med("prefill_s"),
        "backbone_s": med("backbone_s"),
        "flow_s": med("flow_s"),
        "codec_s": med("codec_s"),
        "load_s": statistics.median(w - s for w, s in zip(wall, synth)),
        "peak_rss_bytes": max(rss),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("side", choices=["ref", "infer"])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--frames", type=int, default=25)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="f32", help="compute dtype: f32 (weights upcast) or bf16 (as stored)")
    ap.add_argument("--infer", default="infer")
    ap.add_argument("--stream-frames", type=int, default=0, help="infer only: stream, a chunk every N frames")
    ap.add_argument("--quant", help="infer only: backbone and flow-matching linears quantized at load (q8_0, q4_k)")
    a = ap.parse_args()
    a.checkpoint = a.checkpoint.resolve()
    print(json.dumps(run_ref(a) if a.side == "ref" else run_infer(a)))


if __name__ == "__main__":
    main()
