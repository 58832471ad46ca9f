//! Times the Qwen3-TTS 12 Hz codec's decode of fixed pseudo-random codes on the built-in candle
//! backend, for profiling the convolutions (`perf record -g`):
//!
//! ```text
//! cargo run --release -p infer-tests --example codec_decode -- CODEC_DIR [FRAMES] [RUNS]
//! ```
//!
//! CODEC_DIR is a codec folder (config.json + model.safetensors), e.g.
//! ~/.cache/infer/bench/qwen3-tts-0.6b-random/speech_tokenizer (tools/bench/make_qwen3_tts_bench.py).
//! `INFER_DTYPE=bf16` loads the weights in bf16; `INFER_LOG=infer_qwen3_tts=trace` prints the
//! per-stage split of each decode; `INFER_SAVE=PATH` writes the first run's samples there (raw
//! little-endian f32), to measure how far a change moves the waveform.

use std::path::PathBuf;
use std::time::Instant;

use infer_backend_candle as _; // links the candle backend into Registry::builtin
use infer_core::{DType, Registry};
use infer_qwen3_tts::codec::Codec12Hz;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().ok_or("usage: codec_decode CODEC_DIR [FRAMES] [RUNS]")?);
    let frames: usize = args.get(1).map_or(Ok(25), |s| s.parse())?;
    let runs: usize = args.get(2).map_or(Ok(3), |s| s.parse())?;
    if let Ok(filter) = std::env::var("INFER_LOG") {
        tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::new(filter)).init();
    }
    let dtype = match std::env::var("INFER_DTYPE").as_deref() {
        Ok("bf16") => DType::BF16,
        _ => DType::F32,
    };
    let backend = Registry::builtin()?.get("candle")?;
    let codec = Codec12Hz::load(&dir, &backend, dtype)?;
    let (books, size) = (codec.config().decoder_config.num_quantizers, codec.codebook_size() as u64);
    // A fixed linear congruential sequence: the same codes on every run and build.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let codes: Vec<Vec<u32>> = (0..frames)
        .map(|_| {
            (0..books)
                .map(|_| {
                    state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    ((state >> 33) % size) as u32
                })
                .collect()
        })
        .collect();
    for run in 0..runs {
        let t0 = Instant::now();
        let samples = codec.decode_samples(&codes)?;
        let rms = (samples.iter().map(|s| s * s).sum::<f32>() / samples.len() as f32).sqrt();
        if let (0, Ok(path)) = (run, std::env::var("INFER_SAVE")) {
            std::fs::write(path, samples.iter().flat_map(|s| s.to_le_bytes()).collect::<Vec<u8>>())?;
        }
        println!(
            "run {run}: {frames} frames -> {} samples in {:.3} s (rms {rms:.6})",
            samples.len(),
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
