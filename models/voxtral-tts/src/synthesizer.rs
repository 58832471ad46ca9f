//! Voxtral-4B-TTS as a [`SpeechSynthesizer`]: text + preset voice -> prompt -> backbone + flow
//! matching -> frames -> codec -> audio, decoded in chunks while generating when asked to stream.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use infer_core::audio::{Audio, AudioMetrics, SpeechChunk, SpeechOptions, SpeechSynthesizer, Voice};
use infer_core::text::tekken::Tekken;
use infer_core::{Backend, CancelToken, DType, Error, ModelLoadOptions, Result, Tensor, Weights};

use crate::acoustic_head::AcousticHead;
use crate::backbone::Backbone;
use crate::codec::Codec;
use crate::config::VoxtralTtsConfig;
use crate::generator::{Generation, Generator};
use crate::names::mistral_name;
use crate::prompt::{self, PromptTokens};
use crate::sanitize::sanitize;
use crate::voices::{read_voice, VoiceFiles};

pub const WEIGHTS_FILE: &str = "consolidated.safetensors";
/// The voice used when none is named (mlx-audio's default).
pub const DEFAULT_VOICE: &str = "casual_male";

pub struct VoxtralTts {
    dir: PathBuf,
    pub cfg: VoxtralTtsConfig,
    pub tokenizer: Tekken,
    pub tokens: PromptTokens,
    pub backbone: Backbone,
    pub head: AcousticHead,
    pub codec: Codec,
    voices: VoiceFiles,
    /// Voices read so far, as `(rows, dim)` tensors in the compute dtype.
    voice_cache: Mutex<Vec<(String, Tensor)>>,
    backend: Backend,
    dtype: DType,
}

impl VoxtralTts {
    /// Loads a Voxtral-4B-TTS folder: params.json, consolidated.safetensors, tekken.json,
    /// voice_embedding/.
    pub fn load(dir: &Path, backend: &Backend, options: &ModelLoadOptions) -> Result<Self> {
        let cfg = VoxtralTtsConfig::from_dir(dir)?;
        let tokenizer = Tekken::from_file(&dir.join("tekken.json"))?;
        let tokens = PromptTokens::from_tekken(&tokenizer)?;
        let a = cfg.audio();
        if tokens.audio != a.audio_token_id || tokens.begin_audio != a.begin_audio_token_id {
            return Err(Error::config(
                dir.join("params.json"),
                format!(
                    "audio_token_id {} / begin_audio_token_id {} differ from tekken.json's [AUDIO] {} / [BEGIN_AUDIO] {}",
                    a.audio_token_id, a.begin_audio_token_id, tokens.audio, tokens.begin_audio
                ),
            ));
        }
        let weights = |dtype: DType| -> Result<Weights> {
            Ok(Weights::from_file(&dir.join(WEIGHTS_FILE), backend, dtype)?.with_name_map(Arc::new(mistral_name)))
        };
        // The backbone's and flow-matching transformer's linears are quantized when asked; the
        // embedding tables and the codec keep their float weights.
        let w = weights(options.dtype)?.with_linear_quant(options.quant())?;
        Ok(VoxtralTts {
            backbone: Backbone::load(&w, &cfg)?,
            head: AcousticHead::load(&w, &cfg)?,
            // The codec's convolutions are quality-sensitive and cheap next to the backbone: f32.
            codec: Codec::load(&weights(DType::F32)?, &cfg)?,
            voices: VoiceFiles::scan(dir)?,
            voice_cache: Mutex::new(Vec::new()),
            dir: dir.to_path_buf(),
            cfg,
            tokenizer,
            tokens,
            backend: backend.clone(),
            dtype: options.dtype,
        })
    }

    pub fn generator(&self) -> Generator<'_> {
        Generator { backbone: &self.backbone, head: &self.head }
    }

    /// The voice's rows `(rows, dim)` in the compute dtype.
    pub fn voice(&self, name: &str) -> Result<Tensor> {
        let mut cache = self.voice_cache.lock().map_err(|_| Error::backend("voice cache poisoned"))?;
        if let Some((_, t)) = cache.iter().find(|(n, _)| n == name) {
            return Ok(t.clone());
        }
        let path = self.voices.path(name).ok_or_else(|| {
            let known: Vec<&str> = self.voices.names().collect();
            Error::invalid(if known.is_empty() {
                format!("unknown voice `{name}`: {} has no voice_embedding/ files", self.dir.display())
            } else {
                format!("unknown voice `{name}` (known: {})", known.join(", "))
            })
        })?;
        let t = read_voice(path, self.cfg.dim)?.tensor(&self.backend, self.dtype)?;
        cache.push((name.to_string(), t.clone()));
        Ok(t)
    }

    /// Prompt positions of a voice: tekken.json's `voice_num_audio_tokens`, else its row count.
    fn audio_positions(&self, name: &str, rows: usize) -> usize {
        self.tokenizer
            .audio_section()
            .and_then(|a| a.get("voice_num_audio_tokens"))
            .and_then(|m| m.get(name))
            .and_then(|n| n.as_u64())
            .map_or(rows, |n| n as usize)
    }

    fn voice_name<'a>(&'a self, voice: &'a Voice) -> Result<&'a str> {
        match voice {
            Voice::Preset(name) => Ok(name),
            Voice::Default if self.voices.path(DEFAULT_VOICE).is_some() => Ok(DEFAULT_VOICE),
            Voice::Default => self.voices.names().next().ok_or_else(|| {
                Error::invalid(format!("{} has no voices (voice_embedding/ is missing or empty)", self.dir.display()))
            }),
            Voice::Reference { .. } => Err(no_cloning()),
        }
    }

    /// The prompt ids of `text` for `voice` (sanitized as mlx-audio does).
    pub fn prompt_ids(&self, text: &str, voice: &str) -> Result<Vec<u32>> {
        let text = sanitize(text)?;
        let rows = self.voice(voice)?.dim(0);
        Ok(self.tokens.ids(&self.tokenizer.encode_text(&text), self.audio_positions(voice, rows)))
    }

    /// The backbone input of the prompt `ids` spoken by `voice`.
    pub fn prompt_embeddings(&self, ids: &[u32], voice: &str) -> Result<Tensor> {
        prompt::embed(&self.backbone, ids, self.tokens.audio, &self.voice(voice)?)
    }
}

fn no_cloning() -> Error {
    Error::unsupported(
        "Voxtral TTS's public release cannot clone a voice from a recording (it ships no codec encoder): use --voice NAME",
    )
}

impl SpeechSynthesizer for VoxtralTts {
    fn sample_rate(&self) -> u32 {
        self.codec.sample_rate
    }

    fn voices(&self) -> Vec<String> {
        self.voices.names().map(String::from).collect()
    }

    fn languages(&self) -> Vec<String> {
        // The model reads the language from the text; there is no language control.
        vec!["auto".to_string()]
    }

    fn synthesize(
        &self,
        text: &str,
        options: &SpeechOptions,
        cancel: &CancelToken,
        on_chunk: &mut dyn FnMut(SpeechChunk<'_>) -> bool,
    ) -> Result<AudioMetrics> {
        let start = Instant::now();
        let voice = self.voice_name(&options.voice)?;
        let ids = self.prompt_ids(text, voice)?;
        let prompt = self.prompt_embeddings(&ids, voice)?;
        let num_codebooks = self.cfg.codes_per_frame();
        let mut stream = self.codec.decode_stream();
        let mut pending: Vec<Vec<u32>> = Vec::new();
        let (mut frames, mut samples_out, mut chunks) = (0usize, 0usize, 0usize);
        let mut first_audio: Option<f64> = None;
        let mut codec_time = Duration::ZERO;
        let mut failure: Option<Error> = None;
        let emit = |codes: &[u32], samples: &[f32], done: usize, on_chunk: &mut dyn FnMut(SpeechChunk<'_>) -> bool| {
            on_chunk(SpeechChunk {
                samples: samples.into(),
                codes: codes.into(),
                num_codebooks,
                frames_done: done,
                max_frames: options.max_frames,
            })
        };
        let result = self.generator().generate(&prompt, options, cancel, &mut |frame| {
            frames += 1;
            pending.push(frame.to_vec());
            let mut samples = Vec::new();
            if options.chunk_due(pending.len(), chunks) {
                chunks += 1;
                let t = Instant::now();
                match stream.push(&pending) {
                    Ok(s) => samples = s,
                    Err(e) => {
                        failure = Some(e);
                        return false;
                    }
                }
                codec_time += t.elapsed();
                pending.clear();
                first_audio.get_or_insert(start.elapsed().as_secs_f64());
                samples_out += samples.len();
            }
            emit(frame, &samples, frames, on_chunk)
        });
        if let Some(e) = failure {
            return Err(e);
        }
        let generation: Generation = result?;
        if !pending.is_empty() {
            let t = Instant::now();
            let samples = stream.push(&pending)?;
            codec_time += t.elapsed();
            first_audio.get_or_insert(start.elapsed().as_secs_f64());
            samples_out += samples.len();
            if !emit(&[], &samples, frames, on_chunk) || cancel.is_cancelled() {
                return Err(Error::Cancelled);
            }
        }
        let wall = start.elapsed().as_secs_f64();
        // Where the time goes, for `INFER_LOG=infer_voxtral_tts=debug` (benchmarks).
        tracing::debug!(
            frames,
            stopped = generation.stopped,
            prompt_tokens = ids.len(),
            prefill_s = generation.prefill.as_secs_f64(),
            backbone_s = generation.backbone.as_secs_f64(),
            flow_s = generation.flow.as_secs_f64(),
            codec_s = codec_time.as_secs_f64(),
            wall_s = wall,
            "voxtral-tts timing"
        );
        let audio_seconds = samples_out as f64 / self.sample_rate() as f64;
        Ok(AudioMetrics {
            audio_seconds,
            wall_seconds: wall,
            real_time_factor: if audio_seconds > 0.0 { wall / audio_seconds } else { 0.0 },
            frames,
            first_audio_seconds: first_audio.unwrap_or(wall),
            peak_memory_bytes: self.backend.memory().peak_bytes,
        })
    }

    fn save_voice(&self, _name: &str, _reference: &Audio, _transcript: Option<&str>) -> Result<()> {
        Err(no_cloning())
    }
}
