//! The speech-recognition contract across a plugin boundary, the twin of [`crate::speech_ffi`]. A
//! model plugin implements the plain Rust [`SpeechRecognizer`];
//! its registration ([`register_model!`](crate::register_model)) wraps it in [`PluginRecognizer`]
//! (FFI-safe, panics caught), and the host wraps what it loads in [`HostRecognizer`], which is a
//! `SpeechRecognizer` again. Sessions cross the same way, one call per pushed chunk; audio,
//! options, deltas, transcripts and metrics derive `StableAbi` and cross as they are.

// abi_stable's sabi_trait expands to impls rustc now lints as non-local.
#![allow(non_local_definitions)]

use abi_stable::{
    sabi_trait,
    sabi_trait::TD_Opaque,
    std_types::{RBox, RResult, RSlice},
};

use crate::audio::{
    Audio, RecognitionMetrics, RecognitionOptions, RecognitionSession, SpeechRecognizer, Transcript, TranscriptDelta,
};
use crate::backend::{ffi_result, lift};
use crate::{FfiError, Result};

/// The FFI form of [`RecognitionSession`].
#[sabi_trait]
pub trait RecognitionSessionFfi: Send {
    fn push_audio(&mut self, samples: RSlice<'_, f32>) -> RResult<TranscriptDelta, FfiError>;
    fn finish(&mut self) -> RResult<TranscriptDelta, FfiError>;
    fn metrics(&self) -> RecognitionMetrics;
}

pub type RecognitionSessionBox = RecognitionSessionFfi_TO<'static, RBox<()>>;

/// The FFI form of [`SpeechRecognizer`].
#[sabi_trait]
pub trait RecognizerModel: Send + Sync {
    fn sample_rate(&self) -> u32;
    fn transcribe(&self, audio: &Audio, options: &RecognitionOptions) -> RResult<Transcript, FfiError>;
    fn start_session(&self, options: &RecognitionOptions) -> RResult<RecognitionSessionBox, FfiError>;
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

    fn transcribe(&self, audio: &Audio, options: &RecognitionOptions) -> RResult<Transcript, FfiError> {
        ffi_result("transcribe", || self.0.transcribe(audio, options))
    }

    fn start_session(&self, options: &RecognitionOptions) -> RResult<RecognitionSessionBox, FfiError> {
        ffi_result("start recognition session", || {
            let session = self.0.start_session(options)?;
            Ok(RecognitionSessionFfi_TO::from_value(PluginSession(session), TD_Opaque))
        })
    }
}

/// Plugin side of a session.
struct PluginSession(Box<dyn RecognitionSession>);

impl RecognitionSessionFfi for PluginSession {
    fn push_audio(&mut self, samples: RSlice<'_, f32>) -> RResult<TranscriptDelta, FfiError> {
        ffi_result("push audio", || self.0.push_audio(samples.as_slice()))
    }

    fn finish(&mut self) -> RResult<TranscriptDelta, FfiError> {
        ffi_result("finish session", || self.0.finish())
    }

    fn metrics(&self) -> RecognitionMetrics {
        crate::catch_panic("session metrics", || Ok(self.0.metrics())).unwrap_or_default()
    }
}

/// Host side: a loaded recognizer as a [`SpeechRecognizer`].
pub struct HostRecognizer(pub RecognizerModelBox);

impl SpeechRecognizer for HostRecognizer {
    fn sample_rate(&self) -> u32 {
        self.0.sample_rate()
    }

    fn transcribe(&self, audio: &Audio, options: &RecognitionOptions) -> Result<Transcript> {
        lift(self.0.transcribe(audio, options))
    }

    fn start_session(&self, options: &RecognitionOptions) -> Result<Box<dyn RecognitionSession>> {
        let session = lift(self.0.start_session(options))?;
        Ok(Box::new(HostSession(session)))
    }
}

/// Host side of a session.
struct HostSession(RecognitionSessionBox);

impl RecognitionSession for HostSession {
    fn push_audio(&mut self, samples: &[f32]) -> Result<TranscriptDelta> {
        lift(self.0.push_audio(samples.into()))
    }

    fn finish(&mut self) -> Result<TranscriptDelta> {
        lift(self.0.finish())
    }

    fn metrics(&self) -> RecognitionMetrics {
        self.0.metrics()
    }
}
