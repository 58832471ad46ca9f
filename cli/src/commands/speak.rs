//! `infer speak`: text to an audio file, with a voice preset or a cloned reference voice.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use infer_core::audio::{CodebookSampling, InjectedNoise, SpeechOptions, SpeechSynthesizer, Voice};
use infer_core::audio_io::{create_writer, read_audio, AudioFormat};
use infer_core::{CancelToken, DType, Registry};

use super::shared::ModelArgs;

#[derive(Args, Debug)]
pub struct SpeakArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Quantize the transformer's linear weights at load (Qwen3-TTS: talker and code predictor;
    /// Voxtral TTS: backbone and flow-matching transformer): q8_0 (8 bits, half the bytes of bf16)
    /// or q4_k. Codecs keep f32. Needs a backend with GGML kernels (candle).
    #[arg(long)]
    pub quant: Option<String>,
    /// What to say.
    #[arg(long)]
    pub text: String,
    /// A named voice: a preset made with `infer voice`, or a speaker the checkpoint defines.
    #[arg(long, conflicts_with = "ref_audio")]
    pub voice: Option<String>,
    /// Clone the voice of this recording (any common format, rate and channel count).
    #[arg(long)]
    pub ref_audio: Option<PathBuf>,
    /// Transcript of --ref-audio: clones in context (better) instead of from the x-vector alone.
    #[arg(long, requires = "ref_audio")]
    pub ref_text: Option<String>,
    /// Language name (english, chinese, ...) or auto.
    #[arg(long)]
    pub language: Option<String>,
    /// Output file; the format comes from the extension (wav, pcm, flac, mp3, opus/ogg).
    #[arg(long)]
    pub out: PathBuf,
    /// Output format, overriding the extension.
    #[arg(long)]
    pub format: Option<String>,
    /// Write audio as it is produced (every --stream-frames frames) instead of at the end.
    #[arg(long)]
    pub stream: bool,
    /// Frames per streamed chunk (12.5 frames = 1 s).
    #[arg(long, default_value_t = 12)]
    pub stream_frames: usize,
    /// With --stream, deliver the first chunk after this many frames (0: after --stream-frames),
    /// so that audio starts after one frame's work.
    #[arg(long, default_value_t = 1)]
    pub first_chunk_frames: usize,
    /// Write the generated codes here as TSV, one row per step.
    #[arg(long)]
    pub dump_codes: Option<PathBuf>,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.9)]
    pub temperature: f32,
    #[arg(long, default_value_t = 50)]
    pub top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 1.05)]
    pub repeat_penalty: f32,
    /// Temperature of the remaining codebooks (default: --temperature).
    #[arg(long)]
    pub sub_temperature: Option<f32>,
    #[arg(long)]
    pub sub_top_k: Option<usize>,
    #[arg(long)]
    pub sub_top_p: Option<f32>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Most codec frames to generate (12.5 per second of audio).
    #[arg(long, default_value_t = 2048)]
    pub max_frames: usize,
    /// Flow-matching noise recorded by a reference run (Voxtral TTS): a safetensors file with one
    /// f32 tensor `noise` [frame decodes, acoustic codebooks], row j for the j-th frame decode.
    #[arg(long)]
    pub flow_noise: Option<PathBuf>,
}

pub fn run(registry: &Registry, args: SpeakArgs) -> Result<()> {
    let quant = args.quant.as_deref().map(DType::parse_linear_quant).transpose().context("--quant")?;
    let tts = super::voice::load_tts(registry, &args.model, quant)?;
    let format = match &args.format {
        Some(f) => AudioFormat::from_name(f)?,
        None => AudioFormat::from_path(&args.out)?,
    };
    let voice = match (&args.voice, &args.ref_audio) {
        (Some(name), _) => Voice::Preset(name.clone()),
        (None, Some(path)) => {
            let audio = read_audio(path)?.audio;
            Voice::Reference { audio, transcript: args.ref_text.clone() }
        }
        (None, None) => Voice::Default,
    };
    let options = SpeechOptions {
        voice,
        language: args.language.clone(),
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        repeat_penalty: args.repeat_penalty,
        codebook_sampling: (args.sub_temperature.is_some() || args.sub_top_k.is_some() || args.sub_top_p.is_some())
            .then(|| CodebookSampling {
                temperature: args.sub_temperature.unwrap_or(args.temperature),
                top_k: args.sub_top_k.unwrap_or(args.top_k),
                top_p: args.sub_top_p.unwrap_or(args.top_p),
            }),
        seed: args.seed,
        max_frames: args.max_frames,
        stream_frames: if args.stream { args.stream_frames.max(1) } else { 0 },
        first_chunk_frames: args.first_chunk_frames,
        injected_noise: args.flow_noise.as_deref().map(InjectedNoise::from_safetensors).transpose()?,
    };
    synthesize_to_file(tts.as_ref(), &args, format, &options)
}

fn synthesize_to_file(
    tts: &dyn SpeechSynthesizer,
    args: &SpeakArgs,
    format: AudioFormat,
    options: &SpeechOptions,
) -> Result<()> {
    // Write to a temporary name and rename at the end, so a failure leaves no half file behind.
    let partial = args.out.with_extension(format!("{}.partial", format.extension()));
    let mut sink = create_writer(&partial, Some(format), tts.sample_rate())?;
    let mut codes = match &args.dump_codes {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => None,
    };
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} {pos} frames {msg} [{elapsed}]").expect("static template"));
    let rate = tts.sample_rate() as f64;
    let mut failure: Option<anyhow::Error> = None;
    let mut written = 0usize;
    let result = tts.synthesize(&args.text, options, &CancelToken::new(), &mut |chunk| {
        let mut step = || -> Result<()> {
            if let Some(w) = codes.as_mut() {
                for frame in chunk.codes.chunks(chunk.num_codebooks.max(1)) {
                    let row: Vec<String> = frame.iter().map(u32::to_string).collect();
                    writeln!(w, "{}", row.join("\t"))?;
                }
            }
            if !chunk.samples.is_empty() {
                sink.write(chunk.samples)?;
                written += chunk.samples.len();
            }
            Ok(())
        };
        if let Err(e) = step() {
            failure = Some(e);
            return false;
        }
        bar.set_position(chunk.frames_done as u64);
        bar.set_message(format!("({:.1} s of audio written)", written as f64 / rate));
        true
    });
    bar.finish_and_clear();
    let outcome = match (failure, result) {
        (Some(e), _) => Err(e),
        (None, Err(e)) => Err(e.into()),
        (None, Ok(m)) => Ok(m),
    };
    let metrics = match outcome {
        Ok(m) => m,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    if written == 0 {
        let _ = std::fs::remove_file(&partial);
        bail!("the model produced no audio (it ended before the first frame)");
    }
    sink.finish()?;
    if let Some(mut w) = codes {
        w.flush()?;
    }
    std::fs::rename(&partial, &args.out).with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!(
        "wrote {} ({}): {:.2} s of audio, {} frames in {:.2} s, real-time factor {:.2}, first audio after {:.2} s, peak memory {} MB",
        args.out.display(),
        format.name(),
        metrics.audio_seconds,
        metrics.frames,
        metrics.wall_seconds,
        metrics.real_time_factor,
        metrics.first_audio_seconds,
        metrics.peak_memory_bytes / (1 << 20)
    );
    Ok(())
}
