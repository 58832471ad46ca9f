//! The speech-synthesis contract across a plugin boundary. A model plugin implements the plain
//! Rust [`SpeechSynthesizer`]; its registration ([`register_model!`](crate::register_model)) wraps it in
//! [`PluginSpeech`] (FFI-safe, panics caught), and the host wraps what it loads in [`HostSpeech`],
//! which is a `SpeechSynthesizer` again. Built-in and library plugins take the same path.
//!
//! The options, chunks and metrics of [`crate::audio`] derive `StableAbi` and cross as they are;
//! options and chunks by reference, one call per chunk. Cancellation is polled through the chunk
//! sink, which the model calls at least once per generated frame.

// abi_stable's sabi_trait expands to impls rustc now lints as non-local.
#![allow(non_local_definitions)]

use abi_stable::{
    sabi_trait,
    sabi_trait::TD_Opaque,
    sabi_types::RMut,
    std_types::{RBox, ROption, RResult, RStr, RString, RVec},
};

use crate::audio::{Audio, AudioMetrics, SpeechChunk, SpeechOptions, SpeechSynthesizer};
use crate::backend::{ffi_result, lift};
use crate::text::types::CancelToken;
use crate::{Error, FfiError, Result};

/// Where a synthesizer delivers chunks; the host side of a synthesis call.
#[sabi_trait]
pub trait ChunkSink {
    /// Takes a chunk; `false` asks the model to stop.
    fn accept(&mut self, chunk: SpeechChunk<'_>) -> bool;
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
        text: RStr<'_>,
        options: &SpeechOptions,
        sink: ChunkSink_TO<'_, RMut<'_, ()>>,
    ) -> RResult<AudioMetrics, FfiError>;
    fn save_voice(&self, name: RStr<'_>, reference: &Audio, transcript: ROption<RStr<'_>>) -> RResult<(), FfiError>;
}

pub type SpeechModelBox = SpeechModel_TO<'static, RBox<()>>;

/// Plugin side: exposes a Rust synthesizer through the FFI trait.
pub struct PluginSpeech<M>(pub M);

impl<M: SpeechSynthesizer + 'static> PluginSpeech<M> {
    pub fn boxed(model: M) -> SpeechModelBox {
        SpeechModel_TO::from_value(PluginSpeech(model), TD_Opaque)
    }
}

/// A list of names as it crosses.
fn names(what: &str, list: impl FnOnce() -> Vec<String>) -> RVec<RString> {
    crate::catch_panic(what, || Ok(list())).unwrap_or_default().into_iter().map(RString::from).collect()
}

impl<M: SpeechSynthesizer> SpeechModel for PluginSpeech<M> {
    fn sample_rate(&self) -> u32 {
        crate::catch_panic("sample_rate", || Ok(self.0.sample_rate())).unwrap_or(0)
    }

    fn voices(&self) -> RVec<RString> {
        names("voices", || self.0.voices())
    }

    fn languages(&self) -> RVec<RString> {
        names("languages", || self.0.languages())
    }

    fn synthesize(
        &self,
        text: RStr<'_>,
        options: &SpeechOptions,
        mut sink: ChunkSink_TO<'_, RMut<'_, ()>>,
    ) -> RResult<AudioMetrics, FfiError> {
        ffi_result("speech synthesis", || {
            let cancel = CancelToken::new();
            self.0.synthesize(text.as_str(), options, &cancel, &mut |chunk: SpeechChunk<'_>| {
                let keep = sink.accept(chunk);
                if !keep || sink.cancelled() {
                    cancel.cancel();
                }
                keep
            })
        })
    }

    fn save_voice(&self, name: RStr<'_>, reference: &Audio, transcript: ROption<RStr<'_>>) -> RResult<(), FfiError> {
        ffi_result("save voice", || {
            self.0.save_voice(name.as_str(), reference, transcript.into_option().map(|t| t.as_str()))
        })
    }
}

/// Host side: a loaded speech model as a [`SpeechSynthesizer`].
pub struct HostSpeech(pub SpeechModelBox);

struct Sink<'a> {
    cancel: &'a CancelToken,
    on_chunk: &'a mut dyn FnMut(SpeechChunk<'_>) -> bool,
}

impl ChunkSink for Sink<'_> {
    fn accept(&mut self, chunk: SpeechChunk<'_>) -> bool {
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
        let mut sink = Sink { cancel, on_chunk };
        let metrics = lift(self.0.synthesize(text.into(), options, ChunkSink_TO::from_ptr(&mut sink, TD_Opaque)))?;
        if cancel.is_cancelled() {
            return Err(Error::Cancelled);
        }
        Ok(metrics)
    }

    fn save_voice(&self, name: &str, reference: &Audio, transcript: Option<&str>) -> Result<()> {
        lift(self.0.save_voice(name.into(), reference, transcript.map(RStr::from_str).into()))
    }
}
