//! The model kinds infer defines, each an [`Extension`](super::Extension) with a versioned id.
//! Adding a kind adds one of these (a trait for the model, a box it crosses in, a vtable), and
//! changes nothing else in the ABI.

// abi_stable's derives expand to impls rustc now lints as non-local.
#![allow(non_local_definitions)]

use abi_stable::{
    prefix_type::{PrefixRef, WithMetadata},
    sabi_trait::TD_Opaque,
    std_types::{RResult, RStr},
    StableAbi,
};

use super::extension::{ffi_load, Kind, Loader};
use super::ModelLoadOptions;
use crate::audio::{AudioCodec, SpeechRecognizer, SpeechSynthesizer};
use crate::codec_ffi::{CodecModelBox, PluginCodec};
use crate::embed::TextEmbedder;
use crate::embed_ffi::{EmbedderModelBox, PluginEmbedder};
use crate::recognizer_ffi::{PluginRecognizer, RecognizerModelBox};
use crate::speech_ffi::{PluginSpeech, SpeechModelBox};
use crate::text::causal_lm::{CausalLm, CausalLmBox, CausalLm_TO};
use crate::{Backend, FfiError};

/// A plugin's model as the box of kind `K` (what its Rust loader returns, made FFI-safe).
pub trait IntoKind<K: Kind> {
    fn into_boxed(self) -> K::Boxed;
}

/// Text generation: a decoder ([`CausalLm`]) that the text runtime's engine drives.
pub struct TextGeneration;

/// The vtable of [`TextGeneration`].
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = TextGenerationVtable)))]
#[sabi(missing_field(panic))]
pub struct TextGenerationFns {
    #[sabi(last_prefix_field)]
    pub load:
        extern "C" fn(path: RStr<'_>, backend: &Backend, options: &ModelLoadOptions) -> RResult<CausalLmBox, FfiError>,
}

impl Kind for TextGeneration {
    const ID: &'static str = "infer.text-generation/1";
    const NAME: &'static str = "text";
    type Boxed = CausalLmBox;
    type Vtable = TextGenerationVtable;
    fn vtable<L: Loader<Self>>() -> TextGenerationVtable {
        TextGenerationVtable(PrefixRef::from_ref(
            const { &WithMetadata::new(TextGenerationFns { load: ffi_load::<Self, L> }) },
        ))
    }
}

impl<M: CausalLm + 'static> IntoKind<TextGeneration> for M {
    fn into_boxed(self) -> CausalLmBox {
        CausalLm_TO::from_value(self, TD_Opaque)
    }
}

/// Speech synthesis: text (and a voice) to audio ([`SpeechSynthesizer`]).
pub struct SpeechSynthesis;

/// The vtable of [`SpeechSynthesis`].
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = SpeechSynthesisVtable)))]
#[sabi(missing_field(panic))]
pub struct SpeechSynthesisFns {
    #[sabi(last_prefix_field)]
    pub load: extern "C" fn(
        path: RStr<'_>,
        backend: &Backend,
        options: &ModelLoadOptions,
    ) -> RResult<SpeechModelBox, FfiError>,
}

impl Kind for SpeechSynthesis {
    const ID: &'static str = "infer.speech-synthesis/2";
    const NAME: &'static str = "speech synthesis";
    type Boxed = SpeechModelBox;
    type Vtable = SpeechSynthesisVtable;
    fn vtable<L: Loader<Self>>() -> SpeechSynthesisVtable {
        SpeechSynthesisVtable(PrefixRef::from_ref(
            const { &WithMetadata::new(SpeechSynthesisFns { load: ffi_load::<Self, L> }) },
        ))
    }
}

impl<M: SpeechSynthesizer + 'static> IntoKind<SpeechSynthesis> for M {
    fn into_boxed(self) -> SpeechModelBox {
        PluginSpeech::boxed(self)
    }
}

/// Speech recognition: audio to text, offline and in streaming sessions ([`SpeechRecognizer`]).
pub struct SpeechRecognition;

/// The vtable of [`SpeechRecognition`].
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = SpeechRecognitionVtable)))]
#[sabi(missing_field(panic))]
pub struct SpeechRecognitionFns {
    #[sabi(last_prefix_field)]
    pub load: extern "C" fn(
        path: RStr<'_>,
        backend: &Backend,
        options: &ModelLoadOptions,
    ) -> RResult<RecognizerModelBox, FfiError>,
}

impl Kind for SpeechRecognition {
    const ID: &'static str = "infer.speech-recognition/2";
    const NAME: &'static str = "speech recognition";
    type Boxed = RecognizerModelBox;
    type Vtable = SpeechRecognitionVtable;
    fn vtable<L: Loader<Self>>() -> SpeechRecognitionVtable {
        SpeechRecognitionVtable(PrefixRef::from_ref(
            const { &WithMetadata::new(SpeechRecognitionFns { load: ffi_load::<Self, L> }) },
        ))
    }
}

impl<M: SpeechRecognizer + 'static> IntoKind<SpeechRecognition> for M {
    fn into_boxed(self) -> RecognizerModelBox {
        PluginRecognizer::boxed(self)
    }
}

/// An audio codec: waveform to discrete codes and back ([`AudioCodec`]).
pub struct AudioCodecKind;

/// The vtable of [`AudioCodecKind`].
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = AudioCodecVtable)))]
#[sabi(missing_field(panic))]
pub struct AudioCodecFns {
    #[sabi(last_prefix_field)]
    pub load: extern "C" fn(
        path: RStr<'_>,
        backend: &Backend,
        options: &ModelLoadOptions,
    ) -> RResult<CodecModelBox, FfiError>,
}

impl Kind for AudioCodecKind {
    const ID: &'static str = "infer.audio-codec/2";
    const NAME: &'static str = "audio codec";
    type Boxed = CodecModelBox;
    type Vtable = AudioCodecVtable;
    fn vtable<L: Loader<Self>>() -> AudioCodecVtable {
        AudioCodecVtable(PrefixRef::from_ref(const { &WithMetadata::new(AudioCodecFns { load: ffi_load::<Self, L> }) }))
    }
}

impl<M: AudioCodec + 'static> IntoKind<AudioCodecKind> for M {
    fn into_boxed(self) -> CodecModelBox {
        PluginCodec::boxed(self)
    }
}

/// Text embedding: texts to vectors ([`TextEmbedder`]).
pub struct TextEmbedding;

/// The vtable of [`TextEmbedding`].
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = TextEmbeddingVtable)))]
#[sabi(missing_field(panic))]
pub struct TextEmbeddingFns {
    #[sabi(last_prefix_field)]
    pub load: extern "C" fn(
        path: RStr<'_>,
        backend: &Backend,
        options: &ModelLoadOptions,
    ) -> RResult<EmbedderModelBox, FfiError>,
}

impl Kind for TextEmbedding {
    const ID: &'static str = "infer.text-embedding/1";
    const NAME: &'static str = "text embedding";
    type Boxed = EmbedderModelBox;
    type Vtable = TextEmbeddingVtable;
    fn vtable<L: Loader<Self>>() -> TextEmbeddingVtable {
        TextEmbeddingVtable(PrefixRef::from_ref(
            const { &WithMetadata::new(TextEmbeddingFns { load: ffi_load::<Self, L> }) },
        ))
    }
}

impl<M: TextEmbedder + 'static> IntoKind<TextEmbedding> for M {
    fn into_boxed(self) -> EmbedderModelBox {
        PluginEmbedder::boxed(self)
    }
}
