//! The text-embedding contract: texts in, one vector each out, pooled and normalised the way
//! the checkpoint says (a sentence-transformers folder's modules). The types cross the plugin
//! boundary as they are ([`embed_ffi`](crate::embed_ffi)).

use abi_stable::{
    std_types::{ROption, RString, RVec},
    StableAbi,
};

use crate::Result;

/// How to embed a batch of texts.
#[repr(C)]
#[derive(Debug, Clone, Default, PartialEq, StableAbi)]
pub struct EmbedOptions {
    /// A prompt of the checkpoint's (`query`, ...) whose prefix goes before every text; none: the
    /// texts as given.
    pub prompt_name: ROption<RString>,
    /// Keep the first `dimensions` components (Matryoshka truncation), re-normalised when the
    /// model normalises; 0 keeps them all.
    pub dimensions: usize,
}

impl EmbedOptions {
    /// Options with prompt `name`.
    pub fn with_prompt(name: impl Into<String>) -> Self {
        EmbedOptions { prompt_name: ROption::RSome(RString::from(name.into())), dimensions: 0 }
    }

    pub fn prompt_name(&self) -> Option<&str> {
        self.prompt_name.as_ref().map(RString::as_str).into_option()
    }
}

/// The vectors of a batch, one per text in order, each `dimension` long.
#[repr(C)]
#[derive(Debug, Clone, Default, PartialEq, StableAbi)]
pub struct Embeddings {
    /// Row-major `[text][dimension]`.
    pub values: RVec<f32>,
    pub dimension: usize,
    /// Tokens the model read, prompts and special tokens included.
    pub prompt_tokens: usize,
}

impl Embeddings {
    /// How many vectors it holds.
    pub fn len(&self) -> usize {
        self.values.len().checked_div(self.dimension).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Vector `i`.
    pub fn vector(&self, i: usize) -> &[f32] {
        &self.values[i * self.dimension..(i + 1) * self.dimension]
    }

    /// Every vector, in order.
    pub fn vectors(&self) -> impl Iterator<Item = &[f32]> {
        self.values.chunks(self.dimension.max(1))
    }
}

/// A text-embedding model (Qwen3-Embedding, ...).
pub trait TextEmbedder: Send + Sync {
    /// The architecture name and what it was loaded as, for listings.
    fn architecture(&self) -> String;
    /// Length of a full vector.
    fn dimension(&self) -> usize;
    /// The prompt names the checkpoint defines, sorted.
    fn prompt_names(&self) -> Vec<String>;
    /// One vector per text. An empty text is embedded as sentence-transformers does (its
    /// special tokens alone); an empty list, an unknown prompt name or a `dimensions` above
    /// [`TextEmbedder::dimension`] is an error.
    fn embed(&self, texts: &[&str], options: &EmbedOptions) -> Result<Embeddings>;
}
