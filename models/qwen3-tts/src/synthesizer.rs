//! Qwen3-TTS as a [`SpeechSynthesizer`]: voice -> prompt, talker + code predictor -> frames, the
//! 12 Hz codec -> 24 kHz audio, decoded in chunks while the talker runs when asked to stream.

use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::Instant;

use infer_core::audio::{Audio, AudioMetrics, SpeechChunk, SpeechOptions, SpeechSynthesizer, Voice};
use infer_core::audio_io::{check_audio, resample, AudioLimits};
use infer_core::{Backend, CancelToken, Error, ModelLoadOptions, Result};

use crate::codec::Codec12Hz;
use crate::generator::{CodeGenerator, CodeRequest};
use crate::prompt::SpeakerPrompt;
use crate::speaker_encoder::SpeakerEncoder;
use crate::voices::{VoicePreset, VoiceStore};

pub struct Qwen3Tts {
    dir: PathBuf,
    generator: CodeGenerator,
    codec: Codec12Hz,
    speaker_encoder: Option<SpeakerEncoder>,
    voices: RwLock<VoiceStore>,
    backend: Backend,
}

/// How the talker is conditioned for one request.
struct VoicePrompt {
    speaker: SpeakerPrompt,
    in_context: Option<(String, Vec<Vec<u32>>)>,
}

impl Qwen3Tts {
    /// Loads a `Qwen3-TTS-12Hz-*` folder and its codec (`speech_tokenizer/` or a sibling
    /// `Qwen3-TTS-Tokenizer-12Hz/`).
    pub fn load(dir: &Path, backend: &Backend, options: &ModelLoadOptions) -> Result<Self> {
        let dtype = options.dtype;
        let t0 = Instant::now();
        let generator = CodeGenerator::load(dir, backend, dtype, options.quant())?;
        let t1 = Instant::now();
        // The codec's convolutions are quality-sensitive and cheap next to the talker: keep them f32.
        let codec = Codec12Hz::load_for_model(dir, backend, infer_core::DType::F32)?;
        let t2 = Instant::now();
        let speaker_encoder = match generator.cfg.speaker_encoder_config {
            Some(_) if generator.cfg.tts_model_type.as_deref().is_none_or(|t| t == "base") => {
                Some(SpeakerEncoder::from_dir(dir, backend, infer_core::DType::F32)?)
            }
            _ => None,
        };
        tracing::debug!(
            generator_s = (t1 - t0).as_secs_f64(),
            codec_s = (t2 - t1).as_secs_f64(),
            speaker_encoder_s = t2.elapsed().as_secs_f64(),
            "qwen3-tts load timing"
        );
        if codec.config().decoder_config.num_quantizers != generator.num_codebooks() {
            return Err(Error::checkpoint(
                dir,
                format!(
                    "the codec has {} codebooks but the talker makes {}",
                    codec.config().decoder_config.num_quantizers,
                    generator.num_codebooks()
                ),
            ));
        }
        Ok(Qwen3Tts {
            dir: dir.to_path_buf(),
            voices: RwLock::new(VoiceStore::open(dir)?),
            generator,
            codec,
            speaker_encoder,
            backend: backend.clone(),
        })
    }

    pub fn generator(&self) -> &CodeGenerator {
        &self.generator
    }

    pub fn codec(&self) -> &Codec12Hz {
        &self.codec
    }

    fn speaker_encoder(&self) -> Result<&SpeakerEncoder> {
        self.speaker_encoder.as_ref().ok_or_else(|| {
            Error::unsupported(format!(
                "{} has no speaker encoder (not a Base checkpoint): it cannot clone voices",
                self.dir.display()
            ))
        })
    }

    /// The x-vector and (with a transcript) the codes of a reference recording.
    fn reference_prompt(&self, audio: &Audio, transcript: Option<&str>) -> Result<VoicePreset> {
        check_audio(audio, &AudioLimits::default(), "reference audio")?;
        let xvector = self.speaker_encoder()?.embed(audio)?;
        let in_context = match transcript {
            None => None,
            Some(t) if t.trim().is_empty() => return Err(Error::invalid("the reference transcript is empty")),
            Some(t) => {
                let at_codec_rate = resample(audio, self.codec.config().input_sample_rate)?;
                Some((t.to_string(), self.codec.encode_samples(&at_codec_rate.samples)?))
            }
        };
        Ok(VoicePreset { xvector, in_context })
    }

    fn voice_prompt(&self, voice: &Voice) -> Result<VoicePrompt> {
        let from_preset =
            |p: VoicePreset| VoicePrompt { speaker: SpeakerPrompt::XVector(p.xvector), in_context: p.in_context };
        match voice {
            Voice::Default => Ok(VoicePrompt { speaker: SpeakerPrompt::None, in_context: None }),
            Voice::Reference { audio, transcript } => {
                Ok(from_preset(self.reference_prompt(audio, transcript.as_deref().into())?))
            }
            Voice::Preset(name) => {
                if let Some(p) = self.voices.read().map_err(|_| Error::backend("voice store poisoned"))?.get(name) {
                    return Ok(from_preset(p.clone()));
                }
                let t = &self.generator.cfg.talker_config;
                match t.spk_id.as_ref().and_then(|m| m.get(&name.to_lowercase())) {
                    Some(&id) => Ok(VoicePrompt { speaker: SpeakerPrompt::CodecId(id), in_context: None }),
                    None => Err(Error::invalid(format!(
                        "unknown voice `{name}` (known: {}; make one with `infer voice`)",
                        self.voices().join(", ")
                    ))),
                }
            }
        }
    }
}

impl SpeechSynthesizer for Qwen3Tts {
    fn sample_rate(&self) -> u32 {
        self.codec.config().output_sample_rate
    }

    fn voices(&self) -> Vec<String> {
        let mut names: Vec<String> = match self.voices.read() {
            Ok(store) => store.names().map(String::from).collect(),
            Err(_) => Vec::new(),
        };
        if let Some(ids) = &self.generator.cfg.talker_config.spk_id {
            names.extend(ids.keys().cloned());
        }
        names
    }

    fn languages(&self) -> Vec<String> {
        self.generator.languages()
    }

    fn synthesize(
        &self,
        text: &str,
        options: &SpeechOptions,
        cancel: &CancelToken,
        on_chunk: &mut dyn FnMut(SpeechChunk<'_>) -> bool,
    ) -> Result<AudioMetrics> {
        let start = Instant::now();
        let voice = self.voice_prompt(&options.voice)?;
        let num_codebooks = self.generator.num_codebooks();
        let mut stream = self.codec.decode_stream();
        // In-context cloning continues the reference codes: run them through the decoder first so
        // its causal state is the one the reference decodes with, and drop their samples.
        if let Some((_, codes)) = &voice.in_context {
            stream.push(codes)?;
        }

        let mut pending: Vec<Vec<u32>> = Vec::new();
        let (mut frames, mut samples_out, mut chunks) = (0usize, 0usize, 0usize);
        let mut first_audio: Option<f64> = None;
        let mut failure: Option<Error> = None;
        // `codes`: the frames generated since the previous chunk, row-major.
        let emit = |codes: &[u32], samples: &[f32], done: usize, on_chunk: &mut dyn FnMut(SpeechChunk<'_>) -> bool| {
            on_chunk(SpeechChunk {
                samples: samples.into(),
                codes: codes.into(),
                num_codebooks,
                frames_done: done,
                max_frames: options.max_frames,
            })
        };

        let request = CodeRequest {
            text,
            language: options.language.as_deref().into(),
            speaker: voice.speaker,
            in_context: voice.in_context.as_ref().map(|(t, c)| (t.as_str(), c.clone())),
            non_streaming: false,
        };
        let result = self.generator.generate(&request, options, cancel, &mut |frame| {
            frames += 1;
            pending.push(frame.to_vec());
            let due = options.chunk_due(pending.len(), chunks);
            let samples = if due {
                let t0 = Instant::now();
                match stream.push(&pending) {
                    Ok(s) => {
                        let decode_s = t0.elapsed().as_secs_f64();
                        // Each chunk costs the same at any position (codec/stream.rs); trace shows it.
                        tracing::trace!(
                            frames_done = frames,
                            frames = pending.len(),
                            decode_s,
                            "qwen3-tts chunk decode"
                        );
                        if first_audio.is_none() {
                            tracing::debug!(frames = pending.len(), decode_s, "qwen3-tts first chunk decode");
                        }
                        s
                    }
                    Err(e) => {
                        failure = Some(e);
                        return false;
                    }
                }
            } else {
                Vec::new()
            };
            if due {
                chunks += 1;
                pending.clear();
                first_audio.get_or_insert(start.elapsed().as_secs_f64());
                samples_out += samples.len();
            }
            emit(frame, &samples, frames, on_chunk)
        });
        if let Some(e) = failure {
            return Err(e);
        }
        result?;

        if !pending.is_empty() {
            let t0 = Instant::now();
            let mut samples = stream.push(&pending)?;
            samples.extend(stream.finish()?);
            tracing::debug!(
                frames = pending.len(),
                decode_s = t0.elapsed().as_secs_f64(),
                "qwen3-tts final codec decode"
            );
            first_audio.get_or_insert(start.elapsed().as_secs_f64());
            samples_out += samples.len();
            if !emit(&[], &samples, frames, on_chunk) || cancel.is_cancelled() {
                return Err(Error::Cancelled);
            }
        }
        let wall = start.elapsed().as_secs_f64();
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

    fn save_voice(&self, name: &str, reference: &Audio, transcript: Option<&str>) -> Result<()> {
        let preset = self.reference_prompt(reference, transcript)?;
        self.voices.write().map_err(|_| Error::backend("voice store poisoned"))?.save(name, preset)
    }
}
