//! The speech-synthesis contract across a plugin boundary. A model plugin implements the plain
//! Rust [`SpeechSynthesizer`]; its registration ([`register_model!`](crate::register_model)) wraps it in
//! [`PluginSpeech`] (FFI-safe, panics caught), and the host wraps what it loads in [`HostSpeech`],
//! which is a `SpeechSynthesizer` again. Built-in and library plugins take the same path.
//!
//! Audio and codes cross as borrowed slices, one call per chunk; cancellation is polled through the
//! chunk sink, which the model calls at least once per generated frame.

// abi_stable's sabi_trait expands to impls rustc now lints as non-local.
#![allow(non_local_definitions)]

use abi_stable::{
    sabi_trait,
    sabi_trait::TD_Opaque,
    sabi_types::RMut,
    std_types::{RBox, ROption, RResult, RSlice, RStr, RString, RVec},
    StableAbi,
};

use crate::audio::{
    Audio, AudioMetrics, CodebookSampling, InjectedNoise, SpeechChunk, SpeechOptions, SpeechSynthesizer, Voice,
};
use crate::backend::{ffi_result, lift};
use crate::text::types::CancelToken;
use crate::{Error, FfiError, Result};

#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, StableAbi)]
pub enum VoiceKind {
    Default,
    Preset,
    Reference,
}

/// [`SpeechOptions`] plus the text, flattened for FFI.
#[repr(C)]
#[derive(StableAbi)]
pub struct SpeechRequest<'a> {
    pub text: RStr<'a>,
    pub voice_kind: VoiceKind,
    pub voice_name: RStr<'a>,
    pub reference: RSlice<'a, f32>,
    pub reference_rate: u32,
    pub transcript: ROption<RStr<'a>>,
    pub language: ROption<RStr<'a>>,
    pub temperature: f32,
    pub top_k: u64,
    pub top_p: f32,
    pub repeat_penalty: f32,
    pub codebook_sampling: ROption<CodebookSamplingFfi>,
    pub seed: ROption<u64>,
    pub max_frames: u64,
    pub stream_frames: u64,
    pub first_chunk_frames: u64,
    /// [`SpeechOptions::injected_noise`]: row-major values, `noise_width` per row (0: none).
    pub noise: RSlice<'a, f32>,
    pub noise_width: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, StableAbi)]
pub struct CodebookSamplingFfi {
    pub temperature: f32,
    pub top_k: u64,
    pub top_p: f32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, StableAbi)]
pub struct SpeechChunkFfi<'a> {
    pub samples: RSlice<'a, f32>,
    pub codes: RSlice<'a, u32>,
    pub num_codebooks: u64,
    pub frames_done: u64,
    pub max_frames: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, StableAbi)]
pub struct AudioMetricsFfi {
    pub audio_seconds: f64,
    pub wall_seconds: f64,
    pub real_time_factor: f64,
    pub frames: u64,
    pub first_audio_seconds: f64,
    pub peak_memory_bytes: u64,
}

/// Where a synthesizer delivers chunks; the host side of a synthesis call.
#[sabi_trait]
pub trait ChunkSink {
    /// Takes a chunk; `false` asks the model to stop.
    fn accept(&mut self, chunk: SpeechChunkFfi<'_>) -> bool;
    fn cancelled(&self) -> bool;
}

/// The FFI form of [`SpeechSynthesizer`].
#[sabi_trait]
pub trait SpeechModel: Send + Sync {
    fn sample_rate(&self) -> u32;
    fn voices(&self) -> RVec<RString>;
    fn languages(&self) -> RVec<RString>;
    fn synthesize(
        &self,
        request: &SpeechRequest<'_>,
        sink: ChunkSink_TO<'_, RMut<'_, ()>>,
    ) -> RResult<AudioMetricsFfi, FfiError>;
    fn save_voice(
        &self,
        name: RStr<'_>,
        samples: RSlice<'_, f32>,
        rate: u32,
        transcript: ROption<RStr<'_>>,
    ) -> RResult<(), FfiError>;
}

pub type SpeechModelBox = SpeechModel_TO<'static, RBox<()>>;

/// Plugin side: exposes a Rust synthesizer through the FFI trait.
pub struct PluginSpeech<M>(pub M);

impl<M: SpeechSynthesizer + 'static> PluginSpeech<M> {
    pub fn boxed(model: M) -> SpeechModelBox {
        SpeechModel_TO::from_value(PluginSpeech(model), TD_Opaque)
    }
}

impl<M: SpeechSynthesizer> SpeechModel for PluginSpeech<M> {
    fn sample_rate(&self) -> u32 {
        crate::catch_panic("sample_rate", || Ok(self.0.sample_rate())).unwrap_or(0)
    }

    fn voices(&self) -> RVec<RString> {
        crate::catch_panic("voices", || Ok(self.0.voices()))
            .unwrap_or_default()
            .into_iter()
            .map(RString::from)
            .collect()
    }

    fn languages(&self) -> RVec<RString> {
        crate::catch_panic("languages", || Ok(self.0.languages()))
            .unwrap_or_default()
            .into_iter()
            .map(RString::from)
            .collect()
    }

    fn synthesize(
        &self,
        request: &SpeechRequest<'_>,
        mut sink: ChunkSink_TO<'_, RMut<'_, ()>>,
    ) -> RResult<AudioMetricsFfi, FfiError> {
        ffi_result("speech synthesis", || {
            let options = options_from_request(request);
            let cancel = CancelToken::new();
            let metrics = self.0.synthesize(request.text.as_str(), &options, &cancel, &mut |c: SpeechChunk<'_>| {
                let keep = sink.accept(SpeechChunkFfi {
                    samples: c.samples.into(),
                    codes: c.codes.into(),
                    num_codebooks: c.num_codebooks as u64,
                    frames_done: c.frames_done as u64,
                    max_frames: c.max_frames as u64,
                });
                if !keep || sink.cancelled() {
                    cancel.cancel();
                }
                keep
            })?;
            Ok(AudioMetricsFfi {
                audio_seconds: metrics.audio_seconds,
                wall_seconds: metrics.wall_seconds,
                real_time_factor: metrics.real_time_factor,
                frames: metrics.frames as u64,
                first_audio_seconds: metrics.first_audio_seconds,
                peak_memory_bytes: metrics.peak_memory_bytes,
            })
        })
    }

    fn save_voice(
        &self,
        name: RStr<'_>,
        samples: RSlice<'_, f32>,
        rate: u32,
        transcript: ROption<RStr<'_>>,
    ) -> RResult<(), FfiError> {
        ffi_result("save voice", || {
            let audio = Audio { samples: samples.to_vec(), sample_rate: rate };
            self.0.save_voice(name.as_str(), &audio, transcript.into_option().map(|t| t.as_str()))
        })
    }
}

fn options_from_request(r: &SpeechRequest<'_>) -> SpeechOptions {
    let voice = match r.voice_kind {
        VoiceKind::Default => Voice::Default,
        VoiceKind::Preset => Voice::Preset(r.voice_name.to_string()),
        VoiceKind::Reference => Voice::Reference {
            audio: Audio { samples: r.reference.to_vec(), sample_rate: r.reference_rate },
            transcript: r.transcript.into_option().map(|t| t.to_string()),
        },
    };
    SpeechOptions {
        voice,
        language: r.language.into_option().map(|l| l.to_string()),
        temperature: r.temperature,
        top_k: r.top_k as usize,
        top_p: r.top_p,
        repeat_penalty: r.repeat_penalty,
        codebook_sampling: r.codebook_sampling.into_option().map(|c| CodebookSampling {
            temperature: c.temperature,
            top_k: c.top_k as usize,
            top_p: c.top_p,
        }),
        seed: r.seed.into_option(),
        max_frames: r.max_frames as usize,
        stream_frames: r.stream_frames as usize,
        first_chunk_frames: r.first_chunk_frames as usize,
        injected_noise: (r.noise_width > 0)
            .then(|| InjectedNoise { values: r.noise.to_vec(), width: r.noise_width as usize }),
    }
}

/// Host side: a loaded speech model as a [`SpeechSynthesizer`].
pub struct HostSpeech(pub SpeechModelBox);

struct Sink<'a> {
    cancel: &'a CancelToken,
    on_chunk: &'a mut dyn FnMut(SpeechChunk<'_>) -> bool,
}

impl ChunkSink for Sink<'_> {
    fn accept(&mut self, c: SpeechChunkFfi<'_>) -> bool {
        let chunk = SpeechChunk {
            samples: c.samples.as_slice(),
            codes: c.codes.as_slice(),
            num_codebooks: c.num_codebooks as usize,
            frames_done: c.frames_done as usize,
            max_frames: c.max_frames as usize,
        };
        // A panicking host callback must not unwind into the plugin.
        let keep = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.on_chunk)(chunk)));
        keep.unwrap_or(false) && !self.cancel.is_cancelled()
    }

    fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

impl SpeechSynthesizer for HostSpeech {
    fn sample_rate(&self) -> u32 {
        self.0.sample_rate()
    }

    fn voices(&self) -> Vec<String> {
        self.0.voices().into_iter().map(String::from).collect()
    }

    fn languages(&self) -> Vec<String> {
        self.0.languages().into_iter().map(String::from).collect()
    }

    fn synthesize(
        &self,
        text: &str,
        options: &SpeechOptions,
        cancel: &CancelToken,
        on_chunk: &mut dyn FnMut(SpeechChunk<'_>) -> bool,
    ) -> Result<AudioMetrics> {
        let (voice_kind, voice_name, reference, reference_rate, transcript) = match &options.voice {
            Voice::Default => (VoiceKind::Default, "", &[][..], 0, None),
            Voice::Preset(name) => (VoiceKind::Preset, name.as_str(), &[][..], 0, None),
            Voice::Reference { audio, transcript } => (
                VoiceKind::Reference,
                "",
                audio.samples.as_slice(),
                audio.sample_rate,
                transcript.as_deref().map(RStr::from_str),
            ),
        };
        let request = SpeechRequest {
            text: RStr::from_str(text),
            voice_kind,
            voice_name: RStr::from_str(voice_name),
            reference: reference.into(),
            reference_rate,
            transcript: transcript.into(),
            language: options.language.as_deref().map(RStr::from_str).into(),
            temperature: options.temperature,
            top_k: options.top_k as u64,
            top_p: options.top_p,
            repeat_penalty: options.repeat_penalty,
            codebook_sampling: options
                .codebook_sampling
                .map(|c| CodebookSamplingFfi { temperature: c.temperature, top_k: c.top_k as u64, top_p: c.top_p })
                .into(),
            seed: options.seed.into(),
            max_frames: options.max_frames as u64,
            stream_frames: options.stream_frames as u64,
            first_chunk_frames: options.first_chunk_frames as u64,
            noise: options.injected_noise.as_ref().map_or(&[][..], |n| n.values.as_slice()).into(),
            noise_width: options.injected_noise.as_ref().map_or(0, |n| n.width as u64),
        };
        let mut sink = Sink { cancel, on_chunk };
        let m = lift(self.0.synthesize(&request, ChunkSink_TO::from_ptr(&mut sink, TD_Opaque)))?;
        if cancel.is_cancelled() {
            return Err(Error::Cancelled);
        }
        Ok(AudioMetrics {
            audio_seconds: m.audio_seconds,
            wall_seconds: m.wall_seconds,
            real_time_factor: m.real_time_factor,
            frames: m.frames as usize,
            first_audio_seconds: m.first_audio_seconds,
            peak_memory_bytes: m.peak_memory_bytes,
        })
    }

    fn save_voice(&self, name: &str, reference: &Audio, transcript: Option<&str>) -> Result<()> {
        lift(self.0.save_voice(
            RStr::from_str(name),
            reference.samples.as_slice().into(),
            reference.sample_rate,
            transcript.map(RStr::from_str).into(),
        ))
    }
}
