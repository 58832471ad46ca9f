//! What a model plugin says about its vocabularies (pre-tokenizers, end-of-turn tokens), passed
//! to the tokenizer readers so that they name no model family themselves.

use infer_sdk::plugin::{Architecture, PreTokenizer};

/// The tokenizer conventions of one architecture; [`Default`] is none (GPT-2 splitting, and
/// only the checkpoint's own end-of-sequence ids).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenizerConventions<'a> {
    pub pre_tokenizers: &'a [PreTokenizer],
    pub end_of_turn: &'a [abi_stable::std_types::RStr<'static>],
}

impl<'a> TokenizerConventions<'a> {
    /// Those `architecture` declares (none when it is unknown).
    pub fn of(architecture: Option<&'a Architecture>) -> Self {
        architecture.map_or_else(Self::default, |a| TokenizerConventions {
            pre_tokenizers: a.pre_tokenizers.as_slice(),
            end_of_turn: a.end_of_turn.as_slice(),
        })
    }

    /// The pre-tokenizer named `name` (`tokenizer.ggml.pre`), or the first whose name starts
    /// `class` (tokenizer_config's `tokenizer_class`).
    pub(crate) fn pre_tokenizer(&self, name: &str) -> Option<&'a PreTokenizer> {
        self.pre_tokenizers.iter().find(|p| p.name.as_str() == name)
    }

    pub(crate) fn pre_tokenizer_for_class(&self, class: &str) -> Option<&'a PreTokenizer> {
        self.pre_tokenizers.iter().find(|p| !p.name.is_empty() && class.starts_with(p.name.as_str()))
    }
}
