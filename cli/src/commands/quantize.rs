//! `infer quantize`: a copy of a speech model's checkpoint with the linear weights it quantizes at
//! load (`--quant`) stored as GGML blocks, so later loads map them instead of quantizing again.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use infer_core::checkpoint_info::CheckpointFormat;
use infer_core::quantized_checkpoint::{
    check_destination, check_recordable, check_source, linked_outside, record_quantized, write_quantized,
};
use infer_core::{DType, LoadConfig, ModelKind, Registry};

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// Checkpoint folder of a speech model (Qwen3-TTS, Voxtral TTS, Voxtral Realtime).
    #[arg(long, short)]
    pub model: PathBuf,
    /// Block format of the linear weights: q8_0 or q4_k (as `--quant` of speak / transcribe).
    #[arg(long)]
    pub quant: String,
    /// The new checkpoint folder (created; if it exists it must be empty).
    #[arg(long)]
    pub out: PathBuf,
    /// Backend that quantizes (one with GGML kernels: candle).
    #[arg(long, short)]
    pub backend: Option<String>,
}

pub fn run(registry: &Registry, args: QuantizeArgs) -> Result<()> {
    let quant = DType::parse_linear_quant(&args.quant).context("--quant")?;
    let info = registry.inspect(&args.model).with_context(|| format!("reading {}", args.model.display()))?;
    if info.format == CheckpointFormat::Gguf {
        bail!("{} is a GGUF file: its weights are quantized already", args.model.display());
    }
    // The checkpoint folder (`--model` may name a file in it).
    let src = &info.path;
    // Refuses anything but files and folders (a FIFO would block the copy).
    check_source(src)?;
    check_destination(src, &args.out)?;
    for (file, target) in linked_outside(src)? {
        eprintln!(
            "warning: {} links to {}, outside the checkpoint: what it holds is read and copied as ordinary files",
            file.display(),
            target.display()
        );
    }
    let kind = [ModelKind::SpeechSynthesis, ModelKind::SpeechRecognition]
        .into_iter()
        .find(|k| registry.model_plugin(*k, &info.model_type).is_ok());
    if let Some(kind) = kind {
        check_recordable(registry.model_plugin(kind, &info.model_type)?)?;
    }
    // f32 compute: each weight is quantized from its stored floats (widening is exact): the
    // blocks a load with --quant makes at f32, or at the stored dtype of a half-precision
    // checkpoint (a load at bf16 over f32 weights quantizes bf16-rounded values instead).
    let cfg =
        LoadConfig { quant: Some(quant), backend: args.backend.clone(), dtype: Some(DType::F32), ..Default::default() };
    let started = Instant::now();
    let (loaded, weights) = record_quantized(|| -> Result<()> {
        match kind {
            Some(ModelKind::SpeechSynthesis) => drop(registry.load_speech_model(src, &cfg)?),
            Some(_) => drop(registry.load_recognizer(src, &cfg)?),
            None => bail!(
                "`{}` is not a speech model: text models take quantized weights as GGUF files (llama.cpp's \
                 llama-quantize writes them); `infer quantize` writes speech checkpoints",
                info.model_type
            ),
        }
        Ok(())
    });
    loaded.with_context(|| format!("loading {} with --quant {quant}", src.display()))?;
    let quantized_s = started.elapsed().as_secs_f64();
    eprintln!("quantized {} weights to {quant} in {quantized_s:.1} s; writing {}", weights.len(), args.out.display());
    let written = write_quantized(src, &args.out, &weights)?;
    let gb = |b: u64| b as f64 / 1e9;
    eprintln!(
        "wrote {} in {:.1} s: {} weights {:.2} GB -> {:.2} GB as {quant} ({} safetensors files rewritten, {} files copied); \
         load it without --quant",
        args.out.display(),
        started.elapsed().as_secs_f64() - quantized_s,
        written.quantized,
        gb(written.source_bytes),
        gb(written.block_bytes),
        written.rewritten_files,
        written.copied_files,
    );
    Ok(())
}
