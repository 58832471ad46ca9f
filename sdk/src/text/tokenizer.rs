//! The tokenizer contract: what a model's vocabulary does, wherever it came from. The
//! implementations (Hugging Face `tokenizer.json`, GGUF vocabularies, Tekken) live in the text
//! runtime.

use crate::text::chat_template::ChatTemplate;
use crate::Result;

/// Encodes text to ids and back. Special tokens written in the text (`<|im_start|>`) are
/// recognised as single ids.
pub trait Tokenizer: Send + Sync {
    /// Token ids of `text`; `add_bos` prepends the beginning-of-sequence id when the model has one.
    fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>>;
    /// Token ids of `text` read as literal text: strings that spell special tokens stay text
    /// (for untrusted content such as a chat message). No BOS.
    fn encode_literal(&self, text: &str) -> Result<Vec<u32>>;
    /// Whether `encode` would read part of `text` as a special token.
    fn contains_special_token(&self, text: &str) -> bool;
    fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String>;
    fn vocab_size(&self) -> usize;
    fn token_to_id(&self, token: &str) -> Option<u32>;
    fn id_to_token(&self, id: u32) -> Option<String>;
    fn bos_id(&self) -> Option<u32>;
    /// Whether prompts should start with the BOS id (the checkpoint's `add_bos_token`).
    fn adds_bos(&self) -> bool;
    /// Ids that end a turn (eos, end-of-turn markers).
    fn eos_ids(&self) -> &[u32];
    fn chat_template(&self) -> Option<&dyn ChatTemplate>;
    /// What each id stands for as bytes, indexed by id (what constrained decoding matches ids
    /// against); `None` when this vocabulary cannot say.
    fn token_bytes(&self) -> Option<Vec<TokenBytes>> {
        None
    }
}

/// One id of a vocabulary, as the text it decodes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenBytes {
    /// A regular token: these bytes of UTF-8 text (a fragment of a character for byte tokens).
    Text(Vec<u8>),
    /// A special (control) token with this name: it never matches text.
    Special(String),
    /// An id that never stands for anything (unknown, unused, padding).
    Unused,
}

/// Turns a growing id sequence into text increments without splitting multi-byte characters
/// (the prefix/read offset scheme used by text-generation servers).
pub struct StreamDecoder {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
}

impl Default for StreamDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamDecoder {
    pub fn new() -> Self {
        StreamDecoder { ids: Vec::new(), prefix_offset: 0, read_offset: 0 }
    }

    /// Adds `id`; returns the text it completes (possibly empty while a character is partial).
    pub fn push(&mut self, tok: &dyn Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let prefix = tok.decode(&self.ids[self.prefix_offset..self.read_offset], false)?;
        let full = tok.decode(&self.ids[self.prefix_offset..], false)?;
        if full.len() > prefix.len() && !full.ends_with('\u{FFFD}') && full.is_char_boundary(prefix.len()) {
            let delta = full[prefix.len()..].to_string();
            self.prefix_offset = self.read_offset;
            self.read_offset = self.ids.len();
            Ok(delta)
        } else {
            Ok(String::new())
        }
    }
}
