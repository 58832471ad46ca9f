//! The model kinds infer defines, each an [`Extension`](super::Extension) with a versioned id.
//! Adding a kind adds one of these (a trait for the model, a box it crosses in, a
//! [`declare_kind!`](crate::declare_kind)), and changes nothing else in the ABI.

// abi_stable's derives expand to impls rustc now lints as non-local.
#![allow(non_local_definitions)]

use abi_stable::sabi_trait::TD_Opaque;

use super::extension::Kind;
use crate::audio::{AudioCodec, SpeechRecognizer, SpeechSynthesizer};
use crate::codec_ffi::{CodecModelBox, PluginCodec};
use crate::embed::TextEmbedder;
use crate::embed_ffi::{EmbedderModelBox, PluginEmbedder};
use crate::recognizer_ffi::{PluginRecognizer, RecognizerModelBox};
use crate::speech_ffi::{PluginSpeech, SpeechModelBox};
use crate::text::causal_lm::{CausalLm, CausalLmBox, CausalLm_TO};

/// A plugin's model as the box of kind `K` (what its Rust loader returns, made FFI-safe).
pub trait IntoKind<K: Kind> {
    fn into_boxed(self) -> K::Boxed;
}

crate::declare_kind! {
    /// Text generation: a decoder ([`CausalLm`]) that the text runtime's engine drives.
    pub struct TextGeneration {
        id: "infer.text-generation/1",
        name: "text",
        boxed: CausalLmBox,
        vtable: TextGenerationVtable / TextGenerationFns,
    }
}

impl<M: CausalLm + 'static> IntoKind<TextGeneration> for M {
    fn into_boxed(self) -> CausalLmBox {
        CausalLm_TO::from_value(self, TD_Opaque)
    }
}

crate::declare_kind! {
    /// Speech synthesis: text (and a voice) to audio ([`SpeechSynthesizer`]).
    pub struct SpeechSynthesis {
        id: "infer.speech-synthesis/2",
        name: "speech synthesis",
        boxed: SpeechModelBox,
        vtable: SpeechSynthesisVtable / SpeechSynthesisFns,
    }
}

impl<M: SpeechSynthesizer + 'static> IntoKind<SpeechSynthesis> for M {
    fn into_boxed(self) -> SpeechModelBox {
        PluginSpeech::boxed(self)
    }
}

crate::declare_kind! {
    /// Speech recognition: audio to text, offline and in streaming sessions ([`SpeechRecognizer`]).
    pub struct SpeechRecognition {
        id: "infer.speech-recognition/2",
        name: "speech recognition",
        boxed: RecognizerModelBox,
        vtable: SpeechRecognitionVtable / SpeechRecognitionFns,
    }
}

impl<M: SpeechRecognizer + 'static> IntoKind<SpeechRecognition> for M {
    fn into_boxed(self) -> RecognizerModelBox {
        PluginRecognizer::boxed(self)
    }
}

crate::declare_kind! {
    /// An audio codec: waveform to discrete codes and back ([`AudioCodec`]).
    pub struct AudioCodecKind {
        id: "infer.audio-codec/2",
        name: "audio codec",
        boxed: CodecModelBox,
        vtable: AudioCodecVtable / AudioCodecFns,
    }
}

impl<M: AudioCodec + 'static> IntoKind<AudioCodecKind> for M {
    fn into_boxed(self) -> CodecModelBox {
        PluginCodec::boxed(self)
    }
}

crate::declare_kind! {
    /// Text embedding: texts to vectors ([`TextEmbedder`]).
    pub struct TextEmbedding {
        id: "infer.text-embedding/1",
        name: "text embedding",
        boxed: EmbedderModelBox,
        vtable: TextEmbeddingVtable / TextEmbeddingFns,
    }
}

impl<M: TextEmbedder + 'static> IntoKind<TextEmbedding> for M {
    fn into_boxed(self) -> EmbedderModelBox {
        PluginEmbedder::boxed(self)
    }
}
