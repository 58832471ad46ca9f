//! The speech-recognition contract across a plugin boundary, the twin of [`crate::speech_ffi`]. A
//! model plugin implements the plain Rust [`SpeechRecognizer`];
//! its registration ([`register_model!`](crate::register_model)) wraps it in [`PluginRecognizer`]
//! (FFI-safe, panics caught), and the host wraps what it loads in [`HostRecognizer`], which is a
//! `SpeechRecognizer` again. Sessions cross the same way, one call per pushed chunk.

// abi_stable's sabi_trait expands to impls rustc now lints as non-local.
#![allow(non_local_definitions)]

use abi_stable::{
    sabi_trait,
    sabi_trait::TD_Opaque,
    std_types::{RBox, ROption, RResult, RSlice, RStr, RString, RVec},
    StableAbi,
};

use crate::audio::{
    Audio, RecognitionMetrics, RecognitionOptions, RecognitionSession, SpeechRecognizer, Transcript, TranscriptDelta,
};
use crate::backend::{ffi_result, lift};
use crate::{FfiError, Result};

/// [`RecognitionOptions`] flattened for FFI.
#[repr(C)]
#[derive(StableAbi)]
pub struct RecognitionOptionsFfi<'a> {
    pub language: ROption<RStr<'a>>,
    pub delay_ms: ROption<u32>,
    pub max_tokens: u64,
}

impl<'a> RecognitionOptionsFfi<'a> {
    pub fn new(o: &'a RecognitionOptions) -> Self {
        RecognitionOptionsFfi {
            language: o.language.as_deref().map(RStr::from_str).into(),
            delay_ms: o.delay_ms.into(),
            max_tokens: o.max_tokens as u64,
        }
    }

    pub fn to_options(&self) -> RecognitionOptions {
        RecognitionOptions {
            language: self.language.into_option().map(|l| l.to_string()),
            delay_ms: self.delay_ms.into_option(),
            max_tokens: self.max_tokens as usize,
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Default, StableAbi)]
pub struct TranscriptDeltaFfi {
    pub text: RString,
    pub tokens: RVec<u32>,
}

impl From<TranscriptDelta> for TranscriptDeltaFfi {
    fn from(d: TranscriptDelta) -> Self {
        TranscriptDeltaFfi { text: d.text.into(), tokens: d.tokens.into() }
    }
}

impl From<TranscriptDeltaFfi> for TranscriptDelta {
    fn from(d: TranscriptDeltaFfi) -> Self {
        TranscriptDelta { text: d.text.into(), tokens: d.tokens.into() }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, StableAbi)]
pub struct RecognitionMetricsFfi {
    pub audio_seconds: f64,
    pub wall_seconds: f64,
    pub real_time_factor: f64,
    pub tokens: u64,
    pub encoder_seconds: f64,
    pub decoder_seconds: f64,
    pub max_chunk_seconds: f64,
    pub peak_memory_bytes: u64,
}

impl From<RecognitionMetrics> for RecognitionMetricsFfi {
    fn from(m: RecognitionMetrics) -> Self {
        RecognitionMetricsFfi {
            audio_seconds: m.audio_seconds,
            wall_seconds: m.wall_seconds,
            real_time_factor: m.real_time_factor,
            tokens: m.tokens as u64,
            encoder_seconds: m.encoder_seconds,
            decoder_seconds: m.decoder_seconds,
            max_chunk_seconds: m.max_chunk_seconds,
            peak_memory_bytes: m.peak_memory_bytes,
        }
    }
}

impl From<RecognitionMetricsFfi> for RecognitionMetrics {
    fn from(m: RecognitionMetricsFfi) -> Self {
        RecognitionMetrics {
            audio_seconds: m.audio_seconds,
            wall_seconds: m.wall_seconds,
            real_time_factor: m.real_time_factor,
            tokens: m.tokens as usize,
            encoder_seconds: m.encoder_seconds,
            decoder_seconds: m.decoder_seconds,
            max_chunk_seconds: m.max_chunk_seconds,
            peak_memory_bytes: m.peak_memory_bytes,
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, StableAbi)]
pub struct TranscriptFfi {
    pub text: RString,
    pub tokens: RVec<u32>,
    pub metrics: RecognitionMetricsFfi,
}

/// The FFI form of [`RecognitionSession`].
#[sabi_trait]
pub trait RecognitionSessionFfi: Send {
    fn push_audio(&mut self, samples: RSlice<'_, f32>) -> RResult<TranscriptDeltaFfi, FfiError>;
    fn finish(&mut self) -> RResult<TranscriptDeltaFfi, FfiError>;
    fn metrics(&self) -> RecognitionMetricsFfi;
}

pub type RecognitionSessionBox = RecognitionSessionFfi_TO<'static, RBox<()>>;

/// The FFI form of [`SpeechRecognizer`].
#[sabi_trait]
pub trait RecognizerModel: Send + Sync {
    fn sample_rate(&self) -> u32;
    fn transcribe(
        &self,
        samples: RSlice<'_, f32>,
        rate: u32,
        options: &RecognitionOptionsFfi<'_>,
    ) -> RResult<TranscriptFfi, FfiError>;
    fn start_session(&self, options: &RecognitionOptionsFfi<'_>) -> RResult<RecognitionSessionBox, FfiError>;
}

pub type RecognizerModelBox = RecognizerModel_TO<'static, RBox<()>>;

/// Plugin side: exposes a Rust recognizer through the FFI trait.
pub struct PluginRecognizer<M>(pub M);

impl<M: SpeechRecognizer + 'static> PluginRecognizer<M> {
    pub fn boxed(model: M) -> RecognizerModelBox {
        RecognizerModel_TO::from_value(PluginRecognizer(model), TD_Opaque)
    }
}

impl<M: SpeechRecognizer> RecognizerModel for PluginRecognizer<M> {
    fn sample_rate(&self) -> u32 {
        crate::catch_panic("sample_rate", || Ok(self.0.sample_rate())).unwrap_or(0)
    }

    fn transcribe(
        &self,
        samples: RSlice<'_, f32>,
        rate: u32,
        options: &RecognitionOptionsFfi<'_>,
    ) -> RResult<TranscriptFfi, FfiError> {
        ffi_result("transcribe", || {
            let audio = Audio { samples: samples.to_vec(), sample_rate: rate };
            let t = self.0.transcribe(&audio, &options.to_options())?;
            Ok(TranscriptFfi { text: t.text.into(), tokens: t.tokens.into(), metrics: t.metrics.into() })
        })
    }

    fn start_session(&self, options: &RecognitionOptionsFfi<'_>) -> RResult<RecognitionSessionBox, FfiError> {
        ffi_result("start recognition session", || {
            let session = self.0.start_session(&options.to_options())?;
            Ok(RecognitionSessionFfi_TO::from_value(PluginSession(session), TD_Opaque))
        })
    }
}

/// Plugin side of a session.
struct PluginSession(Box<dyn RecognitionSession>);

impl RecognitionSessionFfi for PluginSession {
    fn push_audio(&mut self, samples: RSlice<'_, f32>) -> RResult<TranscriptDeltaFfi, FfiError> {
        ffi_result("push audio", || self.0.push_audio(samples.as_slice()).map(Into::into))
    }

    fn finish(&mut self) -> RResult<TranscriptDeltaFfi, FfiError> {
        ffi_result("finish session", || self.0.finish().map(Into::into))
    }

    fn metrics(&self) -> RecognitionMetricsFfi {
        crate::catch_panic("session metrics", || Ok(self.0.metrics())).unwrap_or_default().into()
    }
}

/// Host side: a loaded recognizer as a [`SpeechRecognizer`].
pub struct HostRecognizer(pub RecognizerModelBox);

impl SpeechRecognizer for HostRecognizer {
    fn sample_rate(&self) -> u32 {
        self.0.sample_rate()
    }

    fn transcribe(&self, audio: &Audio, options: &RecognitionOptions) -> Result<Transcript> {
        let t = lift(self.0.transcribe(
            audio.samples.as_slice().into(),
            audio.sample_rate,
            &RecognitionOptionsFfi::new(options),
        ))?;
        Ok(Transcript { text: t.text.into(), tokens: t.tokens.into(), metrics: t.metrics.into() })
    }

    fn start_session(&self, options: &RecognitionOptions) -> Result<Box<dyn RecognitionSession>> {
        let session = lift(self.0.start_session(&RecognitionOptionsFfi::new(options)))?;
        Ok(Box::new(HostSession(session)))
    }
}

/// Host side of a session.
struct HostSession(RecognitionSessionBox);

impl RecognitionSession for HostSession {
    fn push_audio(&mut self, samples: &[f32]) -> Result<TranscriptDelta> {
        lift(self.0.push_audio(samples.into())).map(Into::into)
    }

    fn finish(&mut self) -> Result<TranscriptDelta> {
        lift(self.0.finish()).map(Into::into)
    }

    fn metrics(&self) -> RecognitionMetrics {
        self.0.metrics().into()
    }
}
