//! Audio contracts: go-inference has no speech API, so these are ours. Implementations arrive
//! with the audio model plugins (Qwen3-TTS, Voxtral TTS, Voxtral Realtime).
//!
//! The data types here cross the plugin boundary as they are (`#[repr(C)]`, derived
//! [`StableAbi`]), so what holds a string or a vector holds abi_stable's `RString` / `RVec` /
//! `ROption`: they deref to `str` / slices, convert from and to the std types with `.into()`, and
//! free their memory through the library that allocated it.

// abi_stable's derives expand to impls rustc now lints as non-local.
#![allow(non_local_definitions)]

// Re-exported so plugin authors and hosts need no abi_stable dependency of their own.
pub use abi_stable::std_types::{RNone, ROption, RSlice, RSome, RString, RVec};
use abi_stable::StableAbi;

use crate::text::types::CancelToken;
use crate::Result;

/// Mono PCM samples in [-1, 1] at `sample_rate`.
#[repr(C)]
#[derive(Debug, Clone, Default, PartialEq, StableAbi)]
pub struct Audio {
    pub samples: RVec<f32>,
    pub sample_rate: u32,
}

impl Audio {
    pub fn new(samples: impl Into<RVec<f32>>, sample_rate: u32) -> Self {
        Audio { samples: samples.into(), sample_rate }
    }

    pub fn duration_secs(&self) -> f64 {
        if self.sample_rate == 0 {
            0.0
        } else {
            self.samples.len() as f64 / self.sample_rate as f64
        }
    }
}

/// Who speaks: a named preset stored with the model, or a reference recording to clone.
#[repr(u8)]
#[derive(Debug, Clone, PartialEq, StableAbi)]
pub enum Voice {
    Default,
    Preset(RString),
    /// Cloning from reference audio; with its transcript, in-context cloning where supported.
    Reference {
        audio: Audio,
        transcript: ROption<RString>,
    },
}

#[repr(C)]
#[derive(Debug, Clone, PartialEq, StableAbi)]
pub struct SpeechOptions {
    pub voice: Voice,
    /// Language name or code; `RNone` lets the model decide.
    pub language: ROption<RString>,
    /// 0 is greedy.
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub repeat_penalty: f32,
    /// Sampling of the remaining codebooks of a frame, for models that predict them separately
    /// (Qwen3-TTS's code predictor); `RNone` uses `temperature` / `top_k` / `top_p`.
    pub codebook_sampling: ROption<CodebookSampling>,
    pub seed: ROption<u64>,
    /// Upper bound on generated codec frames.
    pub max_frames: usize,
    /// Decode and deliver audio every this many frames while generating (0: once, at the end).
    pub stream_frames: usize,
    /// When streaming, deliver the first chunk after this many frames instead (0: after
    /// `stream_frames`): the first audio then waits for one frame's work while later chunks stay
    /// large enough to decode efficiently.
    pub first_chunk_frames: usize,
    /// Recorded noise to use instead of the random generator, for models that draw noise per
    /// frame (Voxtral TTS's flow matching): reproduces a reference run that recorded its draws.
    pub injected_noise: ROption<InjectedNoise>,
}

/// Standard-normal draws recorded elsewhere: row `j` (`width` values) serves the model's `j`-th
/// draw; running out of rows is an error.
#[repr(C)]
#[derive(Debug, Clone, PartialEq, StableAbi)]
pub struct InjectedNoise {
    pub values: RVec<f32>,
    pub width: usize,
}

impl InjectedNoise {
    pub fn rows(&self) -> usize {
        self.values.len().checked_div(self.width).unwrap_or(0)
    }

    pub fn row(&self, j: usize) -> Option<&[f32]> {
        (j < self.rows()).then(|| &self.values[j * self.width..(j + 1) * self.width])
    }

    /// Reads the f32 tensor `noise` `[draws, width]` of a safetensors file (what a reference run
    /// recorded, e.g. tools/fixtures/make_voxtral_tts.py's `<case>.noise` saved as `noise`).
    pub fn from_safetensors(path: &std::path::Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| crate::Error::io(path, e))?;
        let bad = |m: String| crate::Error::config(path, m);
        let st =
            safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(format!("not a safetensors file ({e})")))?;
        let t = st.tensor("noise").map_err(|_| bad("no tensor `noise` (f32 [draws, width])".into()))?;
        match (t.dtype(), t.shape()) {
            (safetensors::Dtype::F32, &[rows, width]) if rows > 0 && width > 0 => Ok(InjectedNoise {
                values: t.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
                width,
            }),
            (d, s) => Err(bad(format!("`noise` is {d:?} {s:?}; expected f32 [draws, width]"))),
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, StableAbi)]
pub struct CodebookSampling {
    /// 0 is greedy.
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
}

impl SpeechOptions {
    /// Whether `pending` generated-but-undelivered frames make a streamed chunk due, `delivered`
    /// chunks having gone out already.
    pub fn chunk_due(&self, pending: usize, delivered: usize) -> bool {
        let size = match (delivered, self.first_chunk_frames) {
            (0, first) if first > 0 => first,
            _ => self.stream_frames,
        };
        self.stream_frames > 0 && pending >= size
    }
}

impl Default for SpeechOptions {
    fn default() -> Self {
        SpeechOptions {
            voice: Voice::Default,
            language: ROption::RNone,
            temperature: 0.9,
            top_k: 50,
            top_p: 1.0,
            repeat_penalty: 1.05,
            codebook_sampling: ROption::RNone,
            seed: ROption::RNone,
            max_frames: 4096,
            stream_frames: 0,
            first_chunk_frames: 0,
            injected_noise: ROption::RNone,
        }
    }
}

/// Measurements of one synthesis or transcription.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, StableAbi)]
pub struct AudioMetrics {
    pub audio_seconds: f64,
    pub wall_seconds: f64,
    /// wall / audio: below 1 is faster than real time.
    pub real_time_factor: f64,
    /// Codec frames generated.
    pub frames: usize,
    /// Seconds until the first audio was delivered.
    pub first_audio_seconds: f64,
    pub peak_memory_bytes: u64,
}

/// What a synthesizer delivers as it goes: new audio (possibly none yet) and the codec frames
/// generated since the previous chunk.
#[repr(C)]
#[derive(Debug, Clone, Copy, StableAbi)]
pub struct SpeechChunk<'a> {
    pub samples: RSlice<'a, f32>,
    /// New frames, row-major `[frame][codebook]`.
    pub codes: RSlice<'a, u32>,
    pub num_codebooks: usize,
    /// Frames generated so far, and the bound on them.
    pub frames_done: usize,
    pub max_frames: usize,
}

/// Text to speech. Audio and progress arrive through `on_chunk`; returning `false` from it (or
/// cancelling) stops synthesis with [`crate::Error::Cancelled`].
pub trait SpeechSynthesizer: Send + Sync {
    fn sample_rate(&self) -> u32;
    /// Named voices: presets stored with the model and any the checkpoint defines.
    fn voices(&self) -> Vec<String>;
    fn languages(&self) -> Vec<String>;
    fn synthesize(
        &self,
        text: &str,
        options: &SpeechOptions,
        cancel: &CancelToken,
        on_chunk: &mut dyn FnMut(SpeechChunk<'_>) -> bool,
    ) -> Result<AudioMetrics>;
    /// Stores a named voice preset made from a reference recording (and its transcript, for
    /// models that clone in context) next to the model.
    fn save_voice(&self, name: &str, reference: &Audio, transcript: Option<&str>) -> Result<()>;

    /// Synthesizes the whole utterance into one buffer.
    fn synthesize_all(&self, text: &str, options: &SpeechOptions) -> Result<(Audio, AudioMetrics)> {
        let mut samples = Vec::new();
        let metrics = self.synthesize(text, options, &CancelToken::new(), &mut |c| {
            samples.extend_from_slice(&c.samples);
            true
        })?;
        Ok((Audio::new(samples, self.sample_rate()), metrics))
    }
}

/// How to transcribe. Every field has a default the model chooses.
#[repr(C)]
#[derive(Debug, Clone, Default, PartialEq, StableAbi)]
pub struct RecognitionOptions {
    /// Language name or code; `RNone` lets the model decide.
    pub language: ROption<RString>,
    /// How far the text may lag the audio, in ms, for models that trade latency for accuracy
    /// (Voxtral Realtime); `RNone` uses the checkpoint's default.
    pub delay_ms: ROption<u32>,
    /// Bound on generated tokens (0: the model's own bound).
    pub max_tokens: usize,
}

/// Text decided since the previous delta, and every token id generated for it (control tokens
/// included).
#[repr(C)]
#[derive(Debug, Clone, Default, PartialEq, StableAbi)]
pub struct TranscriptDelta {
    pub text: RString,
    pub tokens: RVec<u32>,
}

/// Measurements of one transcription (offline or a whole session).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, StableAbi)]
pub struct RecognitionMetrics {
    /// Audio consumed, in seconds.
    pub audio_seconds: f64,
    /// Wall time spent inside the recognizer.
    pub wall_seconds: f64,
    /// wall / audio: below 1 is faster than real time.
    pub real_time_factor: f64,
    /// Tokens the decoder generated.
    pub tokens: usize,
    /// Wall time in the audio encoder and in the decoder.
    pub encoder_seconds: f64,
    pub decoder_seconds: f64,
    /// Longest single `push_audio` call (streaming latency per chunk), 0 offline.
    pub max_chunk_seconds: f64,
    pub peak_memory_bytes: u64,
}

/// A finished transcription.
#[repr(C)]
#[derive(Debug, Clone, Default, PartialEq, StableAbi)]
pub struct Transcript {
    pub text: RString,
    /// Every id the decoder generated, control tokens included.
    pub tokens: RVec<u32>,
    pub metrics: RecognitionMetrics,
}

/// An incremental transcription: feed audio as it arrives, read text as it is decided. Sessions
/// own what they need, so they can outlive the borrow of the recognizer and move across threads.
pub trait RecognitionSession: Send {
    /// Adds samples (mono, at the recognizer's sample rate) and returns the newly decided text.
    fn push_audio(&mut self, samples: &[f32]) -> Result<TranscriptDelta>;
    /// Marks the end of the audio and returns the rest of the text.
    fn finish(&mut self) -> Result<TranscriptDelta>;
    /// Measurements so far.
    fn metrics(&self) -> RecognitionMetrics;
}

/// Speech to text, offline and streaming.
pub trait SpeechRecognizer: Send + Sync {
    /// The rate `push_audio` expects; [`SpeechRecognizer::transcribe`] resamples any other.
    fn sample_rate(&self) -> u32;
    /// Transcribes a whole recording (mono, any sample rate).
    fn transcribe(&self, audio: &Audio, options: &RecognitionOptions) -> Result<Transcript>;
    fn start_session(&self, options: &RecognitionOptions) -> Result<Box<dyn RecognitionSession>>;
}

/// A neural audio codec: discrete codes <-> waveform.
pub trait AudioCodec: Send + Sync {
    fn sample_rate(&self) -> u32;
    /// Code frames per second.
    fn frame_rate(&self) -> f64;
    fn num_codebooks(&self) -> usize;
    /// Codes as `[frame][codebook]`.
    fn encode(&self, audio: &Audio) -> Result<Vec<Vec<u32>>>;
    fn decode(&self, codes: &[Vec<u32>]) -> Result<Audio>;
}
