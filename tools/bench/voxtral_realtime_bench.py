#!/usr/bin/env python3
"""Voxtral Realtime: infer vs transformers 5.23 (PyTorch CPU) on the same checkpoint and the same
audio, back to back in one run; prints a markdown table (docs/benchmarks.md, "Voxtral Realtime:
infer vs transformers (CPU)", has the numbers).

    tools/fixtures/setup_venv.sh
    PY=~/.cache/infer/venvs/transformers/bin/python
    $PY tools/bench/make_voxtral_realtime_bench.py          # the 4B-shaped checkpoint, once
    $PY tools/bench/voxtral_realtime_bench.py --infer /tmp/rtbench/infer [--audio-repeat 2] [--threads 2]

Sides, each a fresh process under `/usr/bin/time -v` (peak RSS) and a watchdog that kills it past
--max-rss-gb (default 20):

- transformers (`ref`, BF16 weights, BF16 compute): offline `generate` (greedy) on the processor's
  features, then its own streaming path: `generate` pulling 80 ms feature chunks from a Python
  generator (the first chunk carries the left padding and the prompt's audio). Time to first
  token and per-step times come from a logits processor stamping each step; a chunk's latency is
  the wall time between two pulls of the generator (its features plus one decoder step).
- infer: `infer transcribe --json` (offline) and `--stream --fast --json` (80 ms pushes, as fast
  as the model takes them), `--dtype bf16`, with the metrics it reports.

Both decode every position of the audio: the checkpoint's `</s>` embedding row is zero, so its
logit is 0 and greedy never picks it among 131072 random logits; `generate` runs to its default
length (the padded audio's token count) and infer's session to the end of the padded audio. The
script checks the step counts agree. The audio is the Voxtral Realtime fixture's speech-like
recording (tests/fixtures/voxtral-realtime/speech_16k.wav, 3.3 s, 16 kHz) repeated
--audio-repeat times (2: 6.6 s, not a whole number of 80 ms tokens).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
import wave
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE_WAV = REPO / "tests/fixtures/voxtral-realtime/speech_16k.wav"
DEFAULT_CKPT = Path.home() / ".cache/infer/bench/voxtral-realtime-4b"
VENV_PY = Path(os.environ.get("INFER_VENV_DIR", Path.home() / ".cache/infer/venvs")) / "transformers/bin/python"


# ---------------------------------------------------------------- transformers side (in its venv)


def run_ref(a) -> dict:
    import numpy as np
    import soundfile as sf
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList, VoxtralRealtimeForConditionalGeneration
    from transformers import VoxtralRealtimeProcessor

    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    model = VoxtralRealtimeForConditionalGeneration.from_pretrained(str(a.checkpoint), dtype=torch.bfloat16).eval()
    processor = VoxtralRealtimeProcessor.from_pretrained(str(a.checkpoint))
    load_s = time.perf_counter() - t0
    audio, sr = sf.read(str(a.audio), dtype="float32")
    assert sr == 16000 and audio.ndim == 1, (sr, audio.shape)
    audio_s = len(audio) / sr

    class Stamp(LogitsProcessor):
        """Records when each step's logits are ready (the step's token is chosen right after)."""

        def __init__(self):
            self.t = []

        def __call__(self, input_ids, scores):
            self.t.append(time.perf_counter())
            return scores

    out = {"impl": "transformers", "checkpoint": str(a.checkpoint), "audio_s": audio_s, "load_s": load_s,
           "threads": a.threads, "torch": torch.__version__}

    # Offline: features of the whole recording, then generate to its default length.
    with torch.inference_mode():
        stamp = Stamp()
        t0 = time.perf_counter()
        inputs = processor(audio, return_tensors="pt")
        inputs["input_features"] = inputs.input_features.to(torch.bfloat16)
        prompt = inputs.input_ids.shape[1]
        seq = model.generate(**inputs, do_sample=False, logits_processor=LogitsProcessorList([stamp]))
        wall = time.perf_counter() - t0
    ids = seq[0, prompt:].tolist()
    steps = [b - a_ for a_, b in zip(stamp.t, stamp.t[1:])]
    out["offline"] = {
        "wall_s": wall,
        "rtf": wall / audio_s,
        "first_token_s": stamp.t[0] - t0,
        "step_ms_median": 1e3 * statistics.median(steps),
        "step_ms_mean": 1e3 * statistics.fmean(steps),
        "tokens": len(ids),
        "prompt": prompt,
        "ids": ids,
    }
    print(f"transformers offline: {wall:.1f} s, {len(ids)} tokens", file=sys.stderr)

    # Streaming: transformers' generator path, 80 ms of features per pull (as the fixture does,
    # the recording is padded on the right as the offline processor pads it).
    fe = processor.feature_extractor
    right = (-len(audio)) % processor.raw_audio_length_per_tok + processor.num_right_pad_tokens * processor.raw_audio_length_per_tok
    padded = np.pad(audio, (0, right))
    pulls = []
    with torch.inference_mode():
        t0 = time.perf_counter()
        first = processor(padded[: processor.num_samples_first_audio_chunk], is_streaming=True,
                          is_first_audio_chunk=True, return_tensors="pt")

        def chunks():
            pulls.append(time.perf_counter())
            yield first.input_features.to(torch.bfloat16)
            mel_idx = processor.num_mel_frames_first_audio_chunk
            start = mel_idx * fe.hop_length - fe.win_length // 2
            while (end := start + processor.num_samples_per_audio_chunk) < padded.shape[0]:
                pulls.append(time.perf_counter())
                yield processor(padded[start:end], is_streaming=True, is_first_audio_chunk=False,
                                return_tensors="pt").input_features.to(torch.bfloat16)
                mel_idx += processor.audio_length_per_tok
                start = mel_idx * fe.hop_length - fe.win_length // 2
            pulls.append(time.perf_counter())

        stamp = Stamp()
        seq = model.generate(input_ids=first.input_ids, input_features=chunks(), num_delay_tokens=first.num_delay_tokens,
                             do_sample=False, logits_processor=LogitsProcessorList([stamp]))
        wall = time.perf_counter() - t0
    sids = seq[0, first.input_ids.shape[1]:].tolist()
    lat = [b - a_ for a_, b in zip(pulls, pulls[1:])]
    rest = sorted(lat[1:])
    out["stream"] = {
        "wall_s": wall,
        "rtf": wall / audio_s,
        "first_token_s": stamp.t[0] - t0,
        "chunks": len(lat),
        "first_chunk_s": lat[0],
        "chunk_p50_s": pct(rest, 0.50),
        "chunk_p95_s": pct(rest, 0.95),
        "chunk_max_s": max(rest),
        "tokens": len(sids),
        "ids": sids,
    }
    print(f"transformers stream: {wall:.1f} s, {len(sids)} tokens", file=sys.stderr)
    out["peak_rss_self_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def pct(sorted_xs, q):
    """Nearest-rank quantile of an ascending list."""
    if not sorted_xs:
        return None
    return sorted_xs[min(len(sorted_xs), max(1, math.ceil(q * len(sorted_xs)))) - 1]


# ---------------------------------------------------------------- driver


def write_audio(dst: Path, repeat: int) -> float:
    with wave.open(str(FIXTURE_WAV), "rb") as w:
        params, frames = w.getparams(), w.readframes(w.getnframes())
    assert params.framerate == 16000 and params.nchannels == 1 and params.sampwidth == 2, params
    with wave.open(str(dst), "wb") as w:
        w.setparams(params)
        w.writeframes(frames * repeat)
    return params.nframes * repeat / params.framerate


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in open(f"/proc/{p}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
            for t in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in open(f"/proc/{p}/task/{t}/children").read().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def measure(name: str, cmd: list, env: dict, out_dir: Path, max_rss: int) -> dict:
    """Runs `cmd` under /usr/bin/time -v in its own process group; kills the group past `max_rss`.
    Returns the last stdout line (JSON) plus peak RSS, load average and compiler contention."""
    log = out_dir / f"{name}.stderr"
    la0 = os.getloadavg()[0]
    with open(log, "w") as err:
        p = subprocess.Popen(["/usr/bin/time", "-v", *cmd], stdout=subprocess.PIPE, stderr=err, env=env,
                             start_new_session=True, text=True)
        state = {"peak": 0, "killed": False, "busy": 0, "samples": 0}

        def watch():
            while p.poll() is None:
                rss = tree_rss(p.pid)
                state["peak"] = max(state["peak"], rss)
                state["samples"] += 1
                state["busy"] += compiler_running()
                if rss > max_rss:
                    state["killed"] = True
                    os.killpg(p.pid, signal.SIGKILL)
                    return
                time.sleep(0.5)

        th = threading.Thread(target=watch, daemon=True)
        th.start()
        stdout, _ = p.communicate()
        th.join()
    text = log.read_text()
    if state["killed"]:
        sys.exit(f"{name}: killed at {state['peak'] / 2**30:.1f} GiB RSS (over --max-rss-gb); see {log}")
    if p.returncode != 0:
        sys.exit(f"{name} failed (rc {p.returncode}):\n" + "\n".join(text.splitlines()[-20:]))
    (out_dir / f"{name}.json").write_text(stdout)
    res = json.loads(stdout.strip().splitlines()[-1])
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    res["peak_rss_bytes"] = int(m.group(1)) * 1024 if m else state["peak"]
    res["loadavg"] = (la0, os.getloadavg()[0])
    res["compiler_s"] = (state["busy"], state["samples"])
    return res


def compiler_running() -> int:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if open(f"/proc/{pid}/comm").read().strip() in ("rustc", "cargo", "cc1plus", "cc1", "clippy-driver"):
                    return 1
            except OSError:
                pass
    return 0


def wait_idle(max_wait_s: float, quiet_s: int = 30, max_load: float = 0.5):
    """Waits until no compiler has run for `quiet_s` seconds and the 1-minute load average is below
    `max_load`, at most `max_wait_s` (then measures anyway: the table records load and contention)."""
    t0, quiet = time.time(), 0
    while time.time() - t0 < max_wait_s:
        quiet = 0 if compiler_running() else quiet + 1
        if quiet >= quiet_s and os.getloadavg()[0] < max_load:
            print(f"idle after {time.time() - t0:.0f} s", file=sys.stderr)
            return
        time.sleep(1)
    if max_wait_s > 0:
        print(f"NOT idle after {max_wait_s:.0f} s (load {os.getloadavg()}); measuring anyway", file=sys.stderr)


def run_all(a):
    out_dir = a.out or Path(f"/tmp/infer-rt-bench-{time.strftime('%Y%m%d-%H%M%S')}")
    out_dir.mkdir(parents=True, exist_ok=True)
    wav = out_dir / "speech.wav"
    audio_s = write_audio(wav, a.audio_repeat)
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS=str(a.threads), RAYON_NUM_THREADS=str(a.threads))
    max_rss = int(a.max_rss_gb * 2**30)
    print(f"results -> {out_dir}; audio {audio_s:.2f} s; load {os.getloadavg()}", file=sys.stderr)

    wait_idle(a.idle_max_wait_s)
    ref = measure("transformers", [str(a.python), __file__, "ref", str(a.checkpoint), "--audio", str(wav),
                                   "--threads", str(a.threads)], env, out_dir, max_rss)
    base = [str(a.infer), "transcribe", "--model", str(a.checkpoint), "--dtype", a.dtype, "--json"]
    if a.quant:
        base += ["--quant", a.quant]
    wait_idle(a.idle_max_wait_s)
    off = measure("infer-offline", base + [str(wav)], env, out_dir, max_rss)
    print(f"infer offline: {off['metrics']['wall_seconds']:.1f} s", file=sys.stderr)
    wait_idle(a.idle_max_wait_s)
    st = measure("infer-stream", base + ["--stream", "--fast", "--chunk-ms", "80", str(wav)], env, out_dir, max_rss)
    print(f"infer stream: {st['metrics']['wall_seconds']:.1f} s", file=sys.stderr)
    results = {"audio_s": audio_s, "threads": a.threads, "dtype": a.dtype, "quant": a.quant, "transformers": ref,
               "infer_offline": off, "infer_stream": st, "cpu": cpu_name(), "date": time.strftime("%FT%TZ", time.gmtime()),
               "commit": commit()}
    (out_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    report = table(results)
    (out_dir / "report.md").write_text(report)
    print(report)


def cpu_name() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return "?"


def same_prefix(x: list, y: list) -> str:
    n = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    return "all" if n == len(x) == len(y) else f"first {n}"


def table(r: dict) -> str:
    ref, off, st = r["transformers"], r["infer_offline"], r["infer_stream"]
    ro, rs = ref["offline"], ref["stream"]
    om, sm = off["metrics"], st["metrics"]
    audio_s = r["audio_s"]

    def ms(x):
        return "–" if x is None else f"{1e3 * x:.0f}"

    def ratio(a_, b_):
        return "–" if a_ is None or b_ is None or b_ == 0 else f"{a_ / b_:.2f}×"

    gib = 2**30
    infer_step = om["decoder_seconds"] / max(1, om["tokens"])
    lines = [
        f"{audio_s:.2f} s of audio, {r['threads']} threads, weights BF16, compute {r['dtype']} (both), greedy"
        + (f", infer's linears {r['quant']}" if r.get("quant") else "") + "; "
        f"{r['cpu']}, infer {r['commit']}, {r['date']}.",
        "",
        "| | transformers | infer | transformers / infer |",
        "| --- | ---: | ---: | ---: |",
        f"| offline wall s | {ro['wall_s']:.1f} | {om['wall_seconds']:.1f} | {ratio(ro['wall_s'], om['wall_seconds'])} |",
        f"| offline real-time factor (wall / audio) | {ro['rtf']:.2f} | {om['real_time_factor']:.2f} | "
        f"{ratio(ro['rtf'], om['real_time_factor'])} |",
        f"| offline time to first token s | {ro['first_token_s']:.2f} | – (returns at the end) | |",
        f"| offline decode ms / step | {ro['step_ms_mean']:.0f} (mean of steps after the first) | "
        f"{1e3 * infer_step:.0f} (decoder s / tokens, prefill incl.) | {ratio(ro['step_ms_mean'], 1e3 * infer_step)} |",
        f"| offline encoder s | (inside the steps) | {om['encoder_seconds']:.1f} | |",
        f"| offline tokens | {ro['tokens']} | {om['tokens']} | |",
        f"| streaming wall s (80 ms chunks, no pacing) | {rs['wall_s']:.1f} | {sm['wall_seconds']:.1f} | "
        f"{ratio(rs['wall_s'], sm['wall_seconds'])} |",
        f"| streaming real-time factor | {rs['rtf']:.2f} | {sm['real_time_factor']:.2f} | "
        f"{ratio(rs['rtf'], sm['real_time_factor'])} |",
        f"| streaming time to first token s | {rs['first_token_s']:.2f} | {sm['first_token_seconds']:.2f} | "
        f"{ratio(rs['first_token_s'], sm['first_token_seconds'])} |",
        f"| per-chunk latency p50 ms | {ms(rs['chunk_p50_s'])} | {ms(sm.get('chunk_seconds_p50'))} | "
        f"{ratio(rs['chunk_p50_s'], sm.get('chunk_seconds_p50'))} |",
        f"| per-chunk latency p95 ms | {ms(rs['chunk_p95_s'])} | {ms(sm.get('chunk_seconds_p95'))} | "
        f"{ratio(rs['chunk_p95_s'], sm.get('chunk_seconds_p95'))} |",
        f"| per-chunk latency max ms (steady chunks) | {ms(rs['chunk_max_s'])} | {ms(sm.get('chunk_seconds_push_max'))} | |",
        f"| first chunk ms (transformers) / finish ms (infer) | {ms(rs['first_chunk_s'])} | "
        f"{ms(sm.get('finish_seconds'))} | |",
        f"| streaming chunks / tokens | {rs['chunks']} / {rs['tokens']} | {sm['chunks']} + finish / {sm['tokens']} | |",
        f"| load s | {ref['load_s']:.1f} | {om['load_seconds']:.1f} | {ratio(ref['load_s'], om['load_seconds'])} |",
        f"| peak RSS GiB (time -v) | {ref['peak_rss_bytes'] / gib:.2f} (one process, both modes) | "
        f"{off['peak_rss_bytes'] / gib:.2f} offline, {st['peak_rss_bytes'] / gib:.2f} streaming | |",
        f"| load average start–end | {ref['loadavg'][0]:.1f}–{ref['loadavg'][1]:.1f} | "
        f"{off['loadavg'][0]:.1f}–{off['loadavg'][1]:.1f}, {st['loadavg'][0]:.1f}–{st['loadavg'][1]:.1f} | |",
        f"| seconds a compiler ran / sampled | {ref['compiler_s'][0] / 2:.0f} / {ref['compiler_s'][1] / 2:.0f} | "
        f"{off['compiler_s'][0] / 2:.0f} / {off['compiler_s'][1] / 2:.0f}, {st['compiler_s'][0] / 2:.0f} / "
        f"{st['compiler_s'][1] / 2:.0f} | |",
        "",
        f"Same greedy ids: offline {same_prefix(ro['ids'], off['tokens'])} of {len(ro['ids'])}; transformers streaming vs "
        f"its offline {same_prefix(rs['ids'], ro['ids'])}; infer streaming vs its offline "
        f"{same_prefix(st['tokens'], off['tokens'])}.",
    ]
    if ro["tokens"] != om["tokens"]:
        lines.append(f"**Step counts differ** (transformers {ro['tokens']}, infer {om['tokens']}): the ratios are void.")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    r = sub.add_parser("ref", help="the transformers side only (one JSON line)")
    r.add_argument("checkpoint", type=Path)
    r.add_argument("--audio", type=Path, required=True)
    r.add_argument("--threads", type=int, default=2)
    ap.add_argument("--checkpoint", type=Path, default=DEFAULT_CKPT)
    ap.add_argument("--infer", type=Path, default=Path("/tmp/rtbench/infer"), help="a private copy of the release binary")
    ap.add_argument("--python", type=Path, default=VENV_PY, help="the transformers venv's python")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="bf16", help="infer's compute dtype (transformers: bf16)")
    ap.add_argument("--quant", help="infer only: the linears (encoder, projector, decoder, tied head at q8_0) quantized at load (q8_0, q4_k)")
    ap.add_argument("--audio-repeat", type=int, default=2)
    ap.add_argument("--max-rss-gb", type=float, default=20.0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--idle-max-wait-s", type=float, default=0,
                    help="before each side, wait up to this long for no compiler and load < 0.5")
    a = ap.parse_args()
    if a.cmd == "ref":
        print(json.dumps(run_ref(a)))
        return
    for p, what in [(a.checkpoint / "model.safetensors", "run tools/bench/make_voxtral_realtime_bench.py"),
                    (a.infer, "cargo build --release -p infer-cli and copy target/release/infer there"),
                    (a.python, "run tools/fixtures/setup_venv.sh")]:
        if not p.exists():
            sys.exit(f"missing {p}: {what}")
    run_all(a)


if __name__ == "__main__":
    main()
