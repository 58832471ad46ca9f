#!/usr/bin/env python3
"""One side of the Qwen3-TTS comparison (tools/bench/tts_compare.sh); prints one JSON object.

    # the reference, in its venv (~/.cache/infer/venvs/qwen-tts):
    python tools/bench/tts_bench.py ref CHECKPOINT --frames 50 --runs 3 --threads 2
    # infer, any python3 (standard library only on this path):
    python3 tools/bench/tts_bench.py infer CHECKPOINT --infer path/to/infer --frames 50 --runs 3 --threads 2

ref: loads `Qwen3TTSForConditionalGeneration` (transformers' from_pretrained, compute dtype
--dtype, eager attention) and the codec `Qwen3TTSTokenizerV2Model` from CHECKPOINT/speech_tokenizer,
then times `generate` (greedy talker and sub-talker, repetition_penalty 1.05, language english,
streaming text mode, max_new_tokens = frames + 1, which yields `frames` frames when EOS never wins)
plus `decode` of the codes, after one short warm-up. Synthesis time = generate + decode;
load time is reported apart. Peak RSS = the process's ru_maxrss (load + all runs).

infer: runs `infer speak --temperature 0 --max-frames N` RUNS times, each a fresh process with
CANDLE_NUM_THREADS / RAYON_NUM_THREADS = --threads and INFER_LOG=infer_qwen3_tts=debug; synthesis
time, audio seconds and first-audio time are parsed from its stderr summary line, the
talker / code-predictor / codec split from the debug lines; load = process wall - synthesis;
peak RSS = the child's ru_maxrss (os.wait4). With --stream-frames N, `infer speak --stream
--stream-frames N`: first_audio_s is then the time to the first streamed chunk, split into the
prompt prefill, the first frame's code predictor and the first chunk's codec decode
(first_prefill_s, first_predictor_s, first_decode_s; tools/bench/tts_ttfa.sh prints them).

Each run reports medians over runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEXT = "The quick brown fox jumps over the lazy dog. Speech synthesis turns text into sound, one codec frame at a time."
SAMPLE_RATE = 24000


def median(xs):
    return statistics.median(xs) if xs else None


def run_ref(args) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import resource
    from importlib.metadata import version

    import torch
    from transformers import PreTrainedModel, Qwen2TokenizerFast

    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    torch.set_num_threads(args.threads)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    t0 = time.perf_counter()
    tok = Qwen2TokenizerFast.from_pretrained(args.checkpoint)
    # PreTrainedModel.from_pretrained directly: qwen-tts' override also loads the codec through its
    # wrapper, which wants a feature-extractor config the random checkpoints do not have.
    # The config is built by hand: Qwen3TTSSpeakerEncoderConfig rejects the `model_type` key that
    # save_pretrained wrote into config.json.
    raw = json.loads((Path(args.checkpoint) / "config.json").read_text())
    raw.get("speaker_encoder_config", {}).pop("model_type", None)
    model = PreTrainedModel.from_pretrained.__func__(
        Qwen3TTSForConditionalGeneration, args.checkpoint, config=Qwen3TTSConfig(**raw), torch_dtype=dtype,
        attn_implementation="eager",
    ).eval()
    codec = Qwen3TTSTokenizerV2Model.from_pretrained(str(Path(args.checkpoint) / "speech_tokenizer"), torch_dtype=torch.float32).eval()
    load_s = time.perf_counter() - t0

    ids = tok(f"<|im_start|>assistant\n{args.text}<|im_end|>\n<|im_start|>assistant\n", return_tensors="pt")["input_ids"]

    def synth(frames):
        t0 = time.perf_counter()
        codes, _ = model.generate(
            input_ids=[ids],
            languages=["english"],
            non_streaming_mode=False,
            max_new_tokens=frames + 1,
            do_sample=False,
            subtalker_dosample=False,
            repetition_penalty=1.05,
        )
        t1 = time.perf_counter()
        wav = codec.decode(codes[0][None].to(torch.long)).audio_values[0]
        t2 = time.perf_counter()
        return codes[0], wav, t1 - t0, t2 - t1

    with torch.inference_mode():
        synth(3)  # warm-up
        runs = []
        for _ in range(args.runs):
            codes, wav, gen_s, dec_s = synth(args.frames)
            runs.append({"frames": int(codes.shape[0]), "audio_s": wav.numel() / SAMPLE_RATE, "generate_s": gen_s,
                         "decode_s": dec_s, "synth_s": gen_s + dec_s})
    if args.codes_out:
        Path(args.codes_out).write_text("\n".join("\t".join(map(str, f)) for f in codes.tolist()) + "\n")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "impl": "qwen-tts",
        "versions": f"qwen-tts {version('qwen-tts')}, transformers {version('transformers')}, torch {version('torch')}",
        "threads": torch.get_num_threads(),
        "dtype": args.dtype,
        "text_tokens": ids.shape[1],
        "runs": runs,
        "load_s": load_s,
        "frames": median([r["frames"] for r in runs]),
        "audio_s": median([r["audio_s"] for r in runs]),
        "synth_s": median([r["synth_s"] for r in runs]),
        "generate_s": median([r["generate_s"] for r in runs]),
        "decode_s": median([r["decode_s"] for r in runs]),
        "peak_rss_bytes": peak,
    }


SUMMARY = re.compile(
    r"([\d.]+) s of audio, (\d+) frames in ([\d.]+) s, real-time factor ([\d.]+), first audio after ([\d.]+) s, peak memory (\d+) MB"
)


def field(line: str, name: str) -> float | None:
    m = re.search(rf"\b{name}=([\d.e+-]+)", line)
    return float(m.group(1)) if m else None


def run_infer(args) -> dict:
    env = dict(os.environ, CANDLE_NUM_THREADS=str(args.threads), RAYON_NUM_THREADS=str(args.threads),
               INFER_LOG="infer_qwen3_tts=debug", NO_COLOR="1", HF_HUB_OFFLINE="1")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            cmd = [args.infer, "speak", "-m", args.checkpoint, "--dtype", args.dtype, "--text", args.text,
                   "--language", "english", "--temperature", "0", "--max-frames", str(args.frames),
                   "--out", f"{tmp}/out.wav"]
            if args.stream_frames > 0:
                cmd += ["--stream", "--stream-frames", str(args.stream_frames)]
            if args.quant:
                cmd += ["--quant", args.quant]
            if args.codes_out and i == args.runs - 1:
                cmd += ["--dump-codes", args.codes_out]
            t0 = time.perf_counter()
            p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            err = p.stderr.read()
            _, status, usage = os.wait4(p.pid, 0)
            wall = time.perf_counter() - t0
            if status != 0:
                sys.exit(f"infer failed ({status}):\n{err}")
            m = SUMMARY.search(err)
            if not m:
                sys.exit(f"no summary line in infer's stderr:\n{err}")
            audio_s, frames, synth_s, _rtf, first_s, _peak_mb = m.groups()
            gen = next((l for l in err.splitlines() if "generation timing" in l), "")
            dec = next((l for l in err.splitlines() if "final codec decode" in l), "")
            first = next((l for l in err.splitlines() if "qwen3-tts first frame" in l), "")
            first_dec = next((l for l in err.splitlines() if "first chunk decode" in l), "")
            runs.append({
                "frames": int(frames), "audio_s": float(audio_s), "synth_s": float(synth_s),
                "first_audio_s": float(first_s), "process_s": wall, "load_s": wall - float(synth_s),
                "peak_rss_bytes": usage.ru_maxrss * 1024,
                "prefill_s": field(gen, "prefill_s"), "talker_steps_s": field(gen, "talker_steps_s"),
                "code_predictor_s": field(gen, "code_predictor_s"), "decode_s": field(dec, "decode_s"),
                "first_prefill_s": field(first, "prefill_s"), "first_predictor_s": field(first, "predictor_s"),
                "first_decode_s": field(first_dec, "decode_s"),
            })
    version = subprocess.run([args.infer, "--version"], capture_output=True, text=True).stdout.strip()
    out = {"impl": "infer", "versions": version, "threads": args.threads, "dtype": args.dtype,
           "stream_frames": args.stream_frames, "quant": args.quant, "runs": runs}
    for k in ["frames", "audio_s", "synth_s", "first_audio_s", "load_s", "prefill_s", "talker_steps_s",
              "code_predictor_s", "decode_s", "first_prefill_s", "first_predictor_s", "first_decode_s"]:
        vals = [r[k] for r in runs if r[k] is not None]
        out[k] = median(vals)
    out["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("impl", choices=["ref", "infer"])
    ap.add_argument("checkpoint")
    ap.add_argument("--infer", help="the infer binary (impl infer)")
    ap.add_argument("--frames", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--quant", help="infer only: quantize the talker and code predictor at load (q8_0, q4_k)")
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--stream-frames", type=int, default=0,
                    help="infer only: stream, a chunk every N frames (0: write at the end)")
    ap.add_argument("--codes-out", help="write the last run's codes here (TSV, a frame a row)")
    args = ap.parse_args()
    res = run_ref(args) if args.impl == "ref" else run_infer(args)
    res["checkpoint"] = args.checkpoint
    print(json.dumps(res))


if __name__ == "__main__":
    main()
