//! What a model plugin says about the checkpoints it claims, as data: the host reads it to pick
//! the plugin for a checkpoint and to fill what a checkpoint leaves out (a chat format, a GGUF
//! vocabulary's pre-tokenizer), so that no crate below the plugins names a model family.

use abi_stable::{
    std_types::{ROption, RSlice, RStr},
    StableAbi,
};

/// One architecture a model plugin loads.
#[repr(C)]
#[derive(Debug, Clone, Copy, StableAbi)]
pub struct Architecture {
    /// `model_type` in config.json or params.json, or GGUF `general.architecture`.
    pub name: RStr<'static>,
    /// A config.json without `model_type` (and without an `architectures` list) is this
    /// architecture when its weights hold all of these tensors.
    pub marker_tensors: RSlice<'static, RStr<'static>>,
    /// A Mistral-native params.json without `model_type` is this architecture when it has all
    /// of these (JSON pointers, e.g. `/multimodal/whisper_model_args`).
    pub params_sections: RSlice<'static, RStr<'static>>,
    /// Text models: the turn format of checkpoints that carry no chat template.
    pub chat_format: ROption<ChatFormat>,
    /// Text models: tokens that end a turn, stopped on when a GGUF vocabulary has them.
    pub end_of_turn: RSlice<'static, RStr<'static>>,
    /// Text models: pre-tokenizers of byte-level BPE vocabularies, by the name the checkpoint
    /// gives (GGUF `tokenizer.ggml.pre`, or a prefix of tokenizer_config's `tokenizer_class`).
    pub pre_tokenizers: RSlice<'static, PreTokenizer>,
}

/// A built-in chat format: its name (for the one line telling the user) and Jinja source
/// (rendered like a checkpoint's own template, with `bos_token` and `add_generation_prompt`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, StableAbi)]
pub struct ChatFormat {
    pub name: RStr<'static>,
    pub source: RStr<'static>,
}

/// A byte-level BPE pre-tokenizer: the split regex and whether text is NFC-normalized first.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, StableAbi)]
pub struct PreTokenizer {
    pub name: RStr<'static>,
    pub pattern: RStr<'static>,
    pub nfc: bool,
}

const NONE: RSlice<'static, RStr<'static>> = RSlice::from_slice(&[]);

impl Architecture {
    /// An architecture known by its name alone.
    pub const fn named(name: &'static str) -> Self {
        Architecture {
            name: RStr::from_str(name),
            marker_tensors: NONE,
            params_sections: NONE,
            chat_format: ROption::RNone,
            end_of_turn: NONE,
            pre_tokenizers: RSlice::from_slice(&[]),
        }
    }

    pub const fn marker_tensors(self, names: &'static [RStr<'static>]) -> Self {
        Architecture { marker_tensors: RSlice::from_slice(names), ..self }
    }

    pub const fn params_sections(self, pointers: &'static [RStr<'static>]) -> Self {
        Architecture { params_sections: RSlice::from_slice(pointers), ..self }
    }

    pub const fn chat_format(self, name: &'static str, source: &'static str) -> Self {
        Architecture {
            chat_format: ROption::RSome(ChatFormat { name: RStr::from_str(name), source: RStr::from_str(source) }),
            ..self
        }
    }

    pub const fn end_of_turn(self, tokens: &'static [RStr<'static>]) -> Self {
        Architecture { end_of_turn: RSlice::from_slice(tokens), ..self }
    }

    pub const fn pre_tokenizers(self, pre: &'static [PreTokenizer]) -> Self {
        Architecture { pre_tokenizers: RSlice::from_slice(pre), ..self }
    }
}

impl PreTokenizer {
    pub const fn new(name: &'static str, pattern: &'static str, nfc: bool) -> Self {
        PreTokenizer { name: RStr::from_str(name), pattern: RStr::from_str(pattern), nfc }
    }
}

/// `rstrs!["a", "b"]`: a `&'static [RStr]` for [`Architecture`]'s lists.
#[macro_export]
macro_rules! rstrs {
    ($($s:expr),* $(,)?) => {
        &[$($crate::__private::abi_stable::std_types::RStr::from_str($s)),*]
    };
}
