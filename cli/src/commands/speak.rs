//! `infer speak`: text to an audio file, with a voice preset or a cloned reference voice.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use infer_core::audio::{CodebookSampling, InjectedNoise, SpeechOptions, SpeechSynthesizer, Voice};
use infer_core::audio_io::{file_writer, read_audio, AudioFormat};
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
        (Some(name), _) => Voice::Preset(name.as_str().into()),
        (None, Some(path)) => {
            let audio = read_audio(path)?.audio;
            Voice::Reference { audio, transcript: args.ref_text.clone().map(Into::into).into() }
        }
        (None, None) => Voice::Default,
    };
    let options = SpeechOptions {
        voice,
        language: args.language.clone().map(Into::into).into(),
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        repeat_penalty: args.repeat_penalty,
        codebook_sampling: (args.sub_temperature.is_some() || args.sub_top_k.is_some() || args.sub_top_p.is_some())
            .then(|| CodebookSampling {
                temperature: args.sub_temperature.unwrap_or(args.temperature),
                top_k: args.sub_top_k.unwrap_or(args.top_k),
                top_p: args.sub_top_p.unwrap_or(args.top_p),
            })
            .into(),
        seed: args.seed.into(),
        max_frames: args.max_frames,
        stream_frames: if args.stream { args.stream_frames.max(1) } else { 0 },
        first_chunk_frames: args.first_chunk_frames,
        injected_noise: args.flow_noise.as_deref().map(InjectedNoise::from_safetensors).transpose()?.into(),
    };
    synthesize_to_file(tts.as_ref(), &args, format, &options)
}

fn synthesize_to_file(
    tts: &dyn SpeechSynthesizer,
    args: &SpeakArgs,
    format: AudioFormat,
    options: &SpeechOptions,
) -> Result<()> {
    // Write to a new file beside the output and rename it over the output at the end: a failure
    // or Ctrl-C leaves no half file behind, and an existing output is kept until the new one is
    // whole.
    let partial = PartialFile::create(&args.out)?;
    let file = partial.file.try_clone().with_context(|| format!("opening {}", partial.path.display()))?;
    let mut sink = file_writer(file, &partial.path.display().to_string(), format, tts.sample_rate())?;
    let interrupted = on_interrupt();
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
                sink.write(&chunk.samples)?;
                written += chunk.samples.len();
            }
            Ok(())
        };
        if let Err(e) = step() {
            failure = Some(e);
            return false;
        }
        if interrupted.load(Ordering::Relaxed) {
            failure = Some(anyhow::anyhow!("interrupted: {} was not written", args.out.display()));
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
    // `partial` removes its file when dropped on any of these returns.
    let metrics = outcome?;
    if written == 0 {
        bail!("the model produced no audio (it ended before the first frame)");
    }
    sink.finish()?;
    if let Some(mut w) = codes {
        w.flush()?;
    }
    if interrupted.load(Ordering::Relaxed) {
        bail!("interrupted: {} was not written", args.out.display());
    }
    partial.finish(&args.out)?;
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

/// The output being written: a new file in the output's folder, under a name no other run uses,
/// removed when dropped unless [`PartialFile::finish`] renamed it over the output.
struct PartialFile {
    path: PathBuf,
    file: std::fs::File,
    done: bool,
}

impl PartialFile {
    fn create(out: &Path) -> Result<Self> {
        let name = out.file_name().with_context(|| format!("{}: not a file name", out.display()))?;
        let folder = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        // `create_new`: never an existing file, nor through a link planted at this name.
        let path = folder.join(format!(".{}.{}.partial", name.to_string_lossy(), std::process::id()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(PartialFile { path, file, done: false })
    }

    /// Synced and renamed over `out` (one step: readers see the old file or the new one).
    fn finish(mut self, out: &Path) -> Result<()> {
        self.file.sync_all().with_context(|| format!("writing {}", self.path.display()))?;
        std::fs::rename(&self.path, out).with_context(|| format!("writing {}", out.display()))?;
        self.done = true;
        Ok(())
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Ctrl-C (SIGINT) or SIGTERM from now on sets the returned flag instead of killing the process,
/// so the synthesis stops and the partial file is removed; a second one kills as usual
/// (`SA_RESETHAND`).
fn on_interrupt() -> &'static AtomicBool {
    static INTERRUPTED: AtomicBool = AtomicBool::new(false);
    #[cfg(unix)]
    {
        extern "C" fn note(_: libc::c_int) {
            INTERRUPTED.store(true, Ordering::Relaxed);
        }
        // SAFETY: the handler only stores to an atomic (async-signal-safe); the sigaction struct
        // is zeroed and then filled as sigaction(2) documents.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = note as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESETHAND;
            libc::sigemptyset(&mut action.sa_mask);
            for signal in [libc::SIGINT, libc::SIGTERM] {
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
    }
    &INTERRUPTED
}
