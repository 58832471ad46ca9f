//! The text-embedding contract across a plugin boundary. A plugin implements the plain Rust
//! [`TextEmbedder`]; its registration wraps it in [`PluginEmbedder`] (FFI-safe, panics caught),
//! and the host wraps what it loads in [`HostEmbedder`], a `TextEmbedder` again. Texts cross as
//! a slice of strings, vectors as [`Embeddings`] (already FFI-safe).

// abi_stable's sabi_trait expands to impls rustc now lints as non-local.
#![allow(non_local_definitions)]

use abi_stable::{
    sabi_trait,
    sabi_trait::TD_Opaque,
    std_types::{RBox, RResult, RSlice, RStr, RString, RVec},
};

use crate::backend::{ffi_result, lift};
use crate::embed::{EmbedOptions, Embeddings, TextEmbedder};
use crate::{FfiError, Result};

/// The FFI form of [`TextEmbedder`].
#[sabi_trait]
pub trait EmbedderModel: Send + Sync {
    fn architecture(&self) -> RString;
    fn dimension(&self) -> u64;
    fn prompt_names(&self) -> RVec<RString>;
    fn embed(&self, texts: RSlice<'_, RStr<'_>>, options: &EmbedOptions) -> RResult<Embeddings, FfiError>;
}

pub type EmbedderModelBox = EmbedderModel_TO<'static, RBox<()>>;

/// Plugin side: exposes a Rust embedder through the FFI trait.
pub struct PluginEmbedder<M>(pub M);

impl<M: TextEmbedder + 'static> PluginEmbedder<M> {
    pub fn boxed(model: M) -> EmbedderModelBox {
        EmbedderModel_TO::from_value(PluginEmbedder(model), TD_Opaque)
    }
}

impl<M: TextEmbedder> EmbedderModel for PluginEmbedder<M> {
    fn architecture(&self) -> RString {
        crate::catch_panic("architecture", || Ok(self.0.architecture())).unwrap_or_default().into()
    }

    fn dimension(&self) -> u64 {
        crate::catch_panic("dimension", || Ok(self.0.dimension() as u64)).unwrap_or(0)
    }

    fn prompt_names(&self) -> RVec<RString> {
        crate::catch_panic("prompt_names", || Ok(self.0.prompt_names()))
            .unwrap_or_default()
            .into_iter()
            .map(RString::from)
            .collect()
    }

    fn embed(&self, texts: RSlice<'_, RStr<'_>>, options: &EmbedOptions) -> RResult<Embeddings, FfiError> {
        ffi_result("embed", || {
            let texts: Vec<&str> = texts.iter().map(RStr::as_str).collect();
            self.0.embed(&texts, options)
        })
    }
}

/// Host side: a loaded embedder as a [`TextEmbedder`].
pub struct HostEmbedder(pub EmbedderModelBox);

impl TextEmbedder for HostEmbedder {
    fn architecture(&self) -> String {
        self.0.architecture().into()
    }

    fn dimension(&self) -> usize {
        self.0.dimension() as usize
    }

    fn prompt_names(&self) -> Vec<String> {
        self.0.prompt_names().into_iter().map(String::from).collect()
    }

    fn embed(&self, texts: &[&str], options: &EmbedOptions) -> Result<Embeddings> {
        let texts: Vec<RStr<'_>> = texts.iter().map(|t| RStr::from_str(t)).collect();
        lift(self.0.embed(texts.as_slice().into(), options))
    }
}
