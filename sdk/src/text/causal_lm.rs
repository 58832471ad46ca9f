//! The contract between the generation loop (in core) and a decoder architecture (a model
//! plugin). It is an `abi_stable` trait so a plugin library can implement it; everything that is
//! not the forward pass (tokenizing, sampling, stopping, metrics) lives once in core.

// abi_stable's sabi_trait expands to impls rustc now lints as non-local.
#![allow(non_local_definitions)]

use abi_stable::{
    sabi_trait,
    std_types::{RBox, ROption, RResult, RSlice, RSliceMut},
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

    /// Runs several independent sequences in one forward (continuous batching): `tokens` (u32,
    /// shape (1, total)) holds each sequence's new tokens back to back, `lens[i]` of them for
    /// `caches[i]`, which each keep their own positions. Returns f32 logits of each sequence's
    /// last position, shape (sequences, vocab).
    ///
    /// This default runs one forward per sequence; an architecture that can pack the rows into
    /// one pass overrides it (and must give each row the same numbers as the default would).
    fn forward_packed(
        &self,
        tokens: &Tensor,
        lens: RSlice<'_, usize>,
        caches: RSliceMut<'_, KvCache>,
    ) -> RResult<Tensor, FfiError> {
        crate::backend::ffi_result("forward_packed", || {
            let mut caches = caches;
            check_packed(tokens, lens.as_slice(), caches.len())?;
            let mut start = 0;
            let mut rows = Vec::with_capacity(lens.len());
            for (&len, cache) in lens.iter().zip(caches.iter_mut()) {
                let ids = tokens.narrow(1, start, len)?;
                rows.push(crate::backend::lift(self.forward(&ids, cache, ROption::RNone, true))?);
                start += len;
            }
            let rows: Vec<&Tensor> = rows.iter().collect();
            let logits = Tensor::concat(&rows, 1)?;
            let vocab = logits.dim(-1);
            logits.reshape(&[lens.len(), vocab])
        })
    }
}

/// The shapes [`CausalLm::forward_packed`] takes: one cache and a positive length per sequence,
/// lengths adding up to the packed tokens.
pub fn check_packed(tokens: &Tensor, lens: &[usize], caches: usize) -> crate::Result<()> {
    let total: usize = lens.iter().sum();
    if lens.len() != caches || lens.contains(&0) || tokens.dims() != [1, total] {
        return Err(crate::Error::Shape(format!(
            "forward_packed: tokens {:?} for {} caches and lengths {lens:?} (want (1, sum of lengths), one cache per positive length)",
            tokens.dims(),
            caches
        )));
    }
    Ok(())
}

pub type CausalLmBox = CausalLm_TO<'static, RBox<()>>;
