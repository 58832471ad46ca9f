//! `infer transcribe`: speech to text from a file (offline, or streamed at real-time pace or as
//! fast as possible) or from the microphone.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use infer_core::audio::{
    Audio, RecognitionMetrics, RecognitionOptions, RecognitionSession, SpeechRecognizer, TranscriptDelta,
};
use infer_core::audio_io::{check_audio, read_audio, resample, AudioLimits};
use infer_core::{DType, LoadConfig, Registry};

use super::mic;
use super::shared::ModelArgs;

#[derive(Args, Debug)]
pub struct TranscribeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Quantize the text decoder's linear weights at load: q8_0 (8 bits, half the bytes of bf16)
    /// or q4_k; the audio encoder keeps --dtype. Needs a backend with GGML kernels (candle).
    #[arg(long)]
    pub quant: Option<String>,
    /// Audio file: wav, flac, mp3, ogg (any rate and channel count; resampled to the model's).
    #[arg(required_unless_present = "mic", conflicts_with = "mic")]
    pub file: Option<PathBuf>,
    /// Print text as the model decides it, feeding the file at real-time pace.
    #[arg(long)]
    pub stream: bool,
    /// With --stream: feed the file as fast as the model takes it.
    #[arg(long, requires = "stream")]
    pub fast: bool,
    /// Transcribe the default microphone live until Ctrl-C (a build with the `mic` feature).
    #[arg(long)]
    pub mic: bool,
    /// Print one JSON object {"text", "tokens", "metrics"} instead of the text; `tokens` holds
    /// every id the decoder generated, control tokens included.
    #[arg(long)]
    pub json: bool,
    /// How far the text may lag the audio, in ms (Voxtral Realtime: 80 to 2400 in steps of 80).
    /// Default: the checkpoint's.
    #[arg(long)]
    pub delay_ms: Option<u32>,
    /// Audio per pushed chunk when streaming a file, in ms.
    #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u32).range(1..))]
    pub chunk_ms: u32,
    /// Bound on generated tokens (0: the model's own bound).
    #[arg(long, default_value_t = 0)]
    pub max_tokens: usize,
}

/// Files no transcript can come from: shorter than any word, or silent (the silence threshold of
/// voice references: a recording's noise floor stays below -60 dBFS, speech peaks far above).
const FILE_LIMITS: AudioLimits = AudioLimits { min_seconds: 0.1, max_seconds: None, silence_peak_dbfs: -60.0 };

/// What a transcription produced, and when.
#[derive(Default)]
struct Outcome {
    text: String,
    tokens: Vec<u32>,
    metrics: RecognitionMetrics,
    /// Wall seconds from the start until the first generated token / the first text.
    first_token_seconds: Option<f64>,
    first_text_seconds: Option<f64>,
    /// Wall seconds of each `push_audio` (streaming only).
    chunk_seconds: Vec<f64>,
    /// Wall seconds of the session's `finish` (streaming only: the right padding's steps).
    finish_seconds: Option<f64>,
}

pub fn run(registry: &Registry, args: TranscribeArgs) -> Result<()> {
    // Input problems are reported before the (slow) model load.
    if args.mic {
        mic::check_available()?;
    }
    let audio = args.file.as_deref().map(load_file).transpose()?;
    let Some(model_path) = &args.model.model else {
        bail!(
            "--model is required: a Voxtral Realtime checkpoint folder (config.json, model.safetensors and tekken.json, or params.json, consolidated.safetensors and tekken.json)"
        );
    };
    let quant = args.quant.as_deref().map(DType::parse_linear_quant).transpose().context("--quant")?;
    let load_started = Instant::now();
    let rec = registry
        .load_recognizer(model_path, &LoadConfig { quant, ..args.model.load_config()? })
        .with_context(|| format!("loading {}", model_path.display()))?;
    let load_seconds = load_started.elapsed().as_secs_f64();
    let options =
        RecognitionOptions { delay_ms: args.delay_ms.into(), max_tokens: args.max_tokens, ..Default::default() };
    let (mode, outcome) = match audio {
        None => ("mic", stream_mic(rec.as_ref(), &options, !args.json)?),
        Some(audio) if args.stream => {
            let audio = resample(&audio, rec.sample_rate())?;
            let mode = if args.fast { "stream-fast" } else { "stream" };
            (mode, stream_file(rec.as_ref(), &options, &audio, &args, !args.json)?)
        }
        Some(audio) => ("offline", offline(rec.as_ref(), &options, &audio)?),
    };
    report(&args, mode, load_seconds, &outcome)
}

/// Reads `path` (mono at its own rate) and rejects what cannot be transcribed.
fn load_file(path: &Path) -> Result<Audio> {
    if !path.is_file() {
        bail!("{}: no such file", path.display());
    }
    let audio = read_audio(path)?.audio;
    check_audio(&audio, &FILE_LIMITS, &format!("audio {}", path.display()))?;
    Ok(audio)
}

fn offline(rec: &dyn SpeechRecognizer, options: &RecognitionOptions, audio: &Audio) -> Result<Outcome> {
    let started = Instant::now();
    let t = rec.transcribe(audio, options)?;
    let done = started.elapsed().as_secs_f64();
    Ok(Outcome {
        first_token_seconds: (!t.tokens.is_empty()).then_some(done),
        first_text_seconds: (!t.text.is_empty()).then_some(done),
        text: t.text.into(),
        tokens: t.tokens.into(),
        metrics: t.metrics,
        chunk_seconds: Vec::new(),
        finish_seconds: None,
    })
}

/// A session with its output: prints text deltas as they come (unless `print` is off) and
/// records when the first token and text arrived.
struct Streamer {
    session: Box<dyn RecognitionSession>,
    started: Instant,
    print: bool,
    out: Outcome,
}

impl Streamer {
    fn new(rec: &dyn SpeechRecognizer, options: &RecognitionOptions, print: bool) -> Result<Self> {
        Ok(Streamer { session: rec.start_session(options)?, started: Instant::now(), print, out: Outcome::default() })
    }

    fn push(&mut self, samples: &[f32]) -> Result<()> {
        let t = Instant::now();
        let delta = self.session.push_audio(samples)?;
        self.out.chunk_seconds.push(t.elapsed().as_secs_f64());
        self.take(delta)
    }

    fn take(&mut self, delta: TranscriptDelta) -> Result<()> {
        let now = self.started.elapsed().as_secs_f64();
        if !delta.tokens.is_empty() {
            self.out.first_token_seconds.get_or_insert(now);
        }
        if !delta.text.is_empty() {
            self.out.first_text_seconds.get_or_insert(now);
            if self.print {
                let mut stdout = std::io::stdout().lock();
                stdout.write_all(delta.text.as_bytes())?;
                stdout.flush()?;
            }
        }
        self.out.text.push_str(&delta.text);
        self.out.tokens.extend(delta.tokens);
        Ok(())
    }

    fn finish(mut self) -> Result<Outcome> {
        let t = Instant::now();
        let delta = self.session.finish()?;
        self.out.finish_seconds = Some(t.elapsed().as_secs_f64());
        self.take(delta)?;
        self.out.metrics = self.session.metrics();
        Ok(self.out)
    }
}

/// Feeds `audio` (at the recognizer's rate) in `--chunk-ms` pieces, each no sooner than a live
/// source would have delivered it unless `--fast`.
fn stream_file(
    rec: &dyn SpeechRecognizer,
    options: &RecognitionOptions,
    audio: &Audio,
    args: &TranscribeArgs,
    print: bool,
) -> Result<Outcome> {
    let rate = audio.sample_rate as u64;
    let chunk = (rate * args.chunk_ms as u64 / 1000).max(1) as usize;
    let mut streamer = Streamer::new(rec, options, print)?;
    let mut fed = 0usize;
    for piece in audio.samples.chunks(chunk) {
        fed += piece.len();
        if !args.fast {
            let due = streamer.started + Duration::from_secs_f64(fed as f64 / rate as f64);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        streamer.push(piece)?;
    }
    streamer.finish()
}

fn stream_mic(rec: &dyn SpeechRecognizer, options: &RecognitionOptions, print: bool) -> Result<Outcome> {
    let mut streamer = Streamer::new(rec, options, print)?;
    mic::capture(rec.sample_rate(), &mut |samples| streamer.push(samples))?;
    streamer.finish()
}

/// The `q` quantile (nearest rank) of `xs`; `None` when there are none.
fn percentile(xs: &[f64], q: f64) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1));
    v.get(rank - 1).copied()
}

fn report(args: &TranscribeArgs, mode: &str, load_seconds: f64, o: &Outcome) -> Result<()> {
    let m = &o.metrics;
    let streamed = mode != "offline";
    let mean_chunk =
        (!o.chunk_seconds.is_empty()).then(|| o.chunk_seconds.iter().sum::<f64>() / o.chunk_seconds.len() as f64);
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let v = serde_json::json!({
            "text": o.text,
            "tokens": o.tokens,
            "metrics": {
                "mode": mode,
                "audio_seconds": m.audio_seconds,
                "wall_seconds": m.wall_seconds,
                "real_time_factor": m.real_time_factor,
                "load_seconds": load_seconds,
                "first_token_seconds": o.first_token_seconds,
                "first_text_seconds": o.first_text_seconds,
                "tokens": m.tokens,
                "tokens_per_second": if m.wall_seconds > 0.0 { m.tokens as f64 / m.wall_seconds } else { 0.0 },
                "encoder_seconds": m.encoder_seconds,
                "decoder_seconds": m.decoder_seconds,
                "chunks": o.chunk_seconds.len(),
                // Over the `push_audio` calls; `chunk_seconds_max` is the session's slowest call,
                // `finish` (the right padding's steps) included.
                "chunk_seconds_mean": mean_chunk,
                "chunk_seconds_p50": percentile(&o.chunk_seconds, 0.50),
                "chunk_seconds_p95": percentile(&o.chunk_seconds, 0.95),
                "chunk_seconds_push_max": percentile(&o.chunk_seconds, 1.0),
                "chunk_seconds_max": streamed.then_some(m.max_chunk_seconds),
                "finish_seconds": o.finish_seconds,
                "peak_memory_bytes": m.peak_memory_bytes,
            }
        });
        writeln!(stdout, "{v}")?;
        return Ok(());
    }
    if streamed {
        // The text was printed as it came.
        writeln!(stdout)?;
    } else {
        writeln!(stdout, "{}", o.text)?;
    }
    let mut line = format!(
        "[{:.2} s of audio in {:.2} s, real-time factor {:.3}, {} tokens",
        m.audio_seconds, m.wall_seconds, m.real_time_factor, m.tokens
    );
    if let Some(t) = o.first_text_seconds {
        line += &format!(", first text after {:.2} s", t);
    }
    if let Some(mean) = mean_chunk {
        line += &format!(
            ", {} chunks: mean {:.1} ms, max {:.1} ms",
            o.chunk_seconds.len(),
            mean * 1e3,
            m.max_chunk_seconds * 1e3
        );
    }
    eprintln!("{line}, peak memory {} MB]", m.peak_memory_bytes / (1 << 20));
    Ok(())
}
