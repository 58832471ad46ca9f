//! `infer voice`: make and list the named voice presets stored next to a speech model.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use infer_core::audio::SpeechSynthesizer;
use infer_core::audio_io::read_audio;
use infer_core::{DType, LoadConfig, Registry};

use super::shared::ModelArgs;

#[derive(Args, Debug)]
pub struct VoiceArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Name of the preset to create (letters, digits, `-`, `_`).
    #[arg(long, requires = "ref_audio")]
    pub name: Option<String>,
    /// Reference recording of the voice (any common format, rate and channel count).
    #[arg(long)]
    pub ref_audio: Option<PathBuf>,
    /// Transcript of the recording: the preset then clones in context.
    #[arg(long, requires = "ref_audio")]
    pub ref_text: Option<String>,
}

/// Loads the speech model named by `--model` (there is no default speech model), its linear
/// weights quantized to `quant` when given.
pub fn load_tts(registry: &Registry, args: &ModelArgs, quant: Option<DType>) -> Result<Box<dyn SpeechSynthesizer>> {
    let Some(path) = &args.model else {
        bail!("--model is required: a Qwen3-TTS checkpoint folder (config.json, model.safetensors, vocab.json, ...) or a Voxtral TTS one (params.json, consolidated.safetensors, tekken.json, voice_embedding/)");
    };
    let cfg = LoadConfig { quant, ..args.load_config()? };
    registry.load_speech_model(path, &cfg).with_context(|| format!("loading {}", path.display()))
}

pub fn run(registry: &Registry, args: VoiceArgs) -> Result<()> {
    let tts = load_tts(registry, &args.model, None)?;
    match (&args.name, &args.ref_audio) {
        (Some(name), Some(path)) => {
            let audio = read_audio(path)?.audio;
            tts.save_voice(name, &audio, args.ref_text.as_deref())?;
            let mode = if args.ref_text.is_some() { "in-context clone" } else { "x-vector" };
            eprintln!("saved voice `{name}` ({mode}) from {}", path.display());
        }
        (None, None) => {}
        _ => bail!("give both --name and --ref-audio to make a voice, or neither to list them"),
    }
    let voices = tts.voices();
    if voices.is_empty() {
        println!("no voices yet: make one with `infer voice --model ... --name NAME --ref-audio FILE`");
    }
    for v in voices {
        println!("{v}");
    }
    Ok(())
}
