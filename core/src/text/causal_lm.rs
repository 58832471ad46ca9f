//! The contract between the generation loop (in core) and a decoder architecture (a model
//! plugin). It is an `abi_stable` trait so a plugin library can implement it; everything that is
//! not the forward pass (tokenizing, sampling, stopping, metrics) lives once in core.

// abi_stable's sabi_trait expands to impls rustc now lints as non-local.
#![allow(non_local_definitions)]

use abi_stable::{
    sabi_trait,
    std_types::{RBox, ROption, RResult},
};

use crate::text::kv_cache::KvCache;
use crate::text::types::ModelInfo;
use crate::{FfiError, Tensor};

#[sabi_trait]
pub trait CausalLm: Send + Sync {
    fn info(&self) -> ModelInfo;

    /// Fresh caches for one sequence; `context_len > 0` bounds every layer to that many positions.
    fn new_cache(&self, context_len: usize) -> RResult<KvCache, FfiError>;

    /// Runs `tokens` (u32, shape (batch, seq)) through the decoder, appending to `cache`.
    /// `mask` is an optional additive mask broadcastable to (batch, 1, seq, cached + seq).
    /// Returns f32 logits of shape (batch, seq, vocab), or (batch, 1, vocab) when `last_only`.
    fn forward(
        &self,
        tokens: &Tensor,
        cache: &mut KvCache,
        mask: ROption<&Tensor>,
        last_only: bool,
    ) -> RResult<Tensor, FfiError>;
}

pub type CausalLmBox = CausalLm_TO<'static, RBox<()>>;
