//! The decoder-only skeleton every LLM architecture shares:
//! `embed -> layers -> final norm -> lm_head`, implementing the core `CausalLm` contract (KV
//! cache per layer, sliding windows, packed batches). An architecture supplies its layers
//! ([`crate::DecoderBlock`] or its own [`DecoderLayer`]) and weights in [`DecoderParts`]; this
//! file owns the plumbing.
//!
//! Continuous batching (`forward_packed`) runs the active sequences' new tokens packed along the
//! token axis through one forward: embeddings, norms, projections and the MLP see every row at
//! once, so each weight is read once per step rather than once per sequence (decode is
//! memory-bound); only attention splits the rows, each sequence against its own cache at its own
//! positions. Every op but attention works row by row, so a sequence gets the numbers it would
//! get alone.

use abi_stable::std_types::{ROption, RResult, RSlice, RSliceMut};
use infer_sdk::text::causal_lm::check_packed;
use infer_sdk::{backend::ffi_result, CausalLm, DType, FfiError, KvCache, ModelInfo, Result, Tensor};

use crate::{DecoderLayer, KvTarget, Linear, Norm, RopeAngles, Rotary};

/// What a [`CausalDecoder`] is assembled from.
pub struct DecoderParts {
    pub info: ModelInfo,
    /// (vocab, hidden) token embeddings.
    pub embed: Tensor,
    /// The compute dtype: rows looked up in a float table stored in another dtype (a table left
    /// in the checkpoint's pages) are converted to it.
    pub dtype: DType,
    /// Multiplies embeddings (Gemma: sqrt(hidden)).
    pub embed_scale: Option<f64>,
    pub layers: Vec<Box<dyn DecoderLayer>>,
    /// Per-layer sliding window for its cache (0: global).
    pub layer_windows: Vec<usize>,
    /// The final norm, before the head.
    pub norm: Norm,
    pub lm_head: Linear,
    /// The rotary embeddings in use (Gemma 3 has a local and a global one).
    pub ropes: Vec<Rotary>,
    /// Which of `ropes` each layer uses.
    pub layer_rope: Vec<usize>,
}

/// A decoder-only LLM: the `CausalLm` a text-model plugin's `load` returns.
pub struct CausalDecoder {
    parts: DecoderParts,
}

impl CausalDecoder {
    pub fn new(parts: DecoderParts) -> Self {
        CausalDecoder { parts }
    }

    fn embed(&self, tokens: &Tensor) -> Result<Tensor> {
        let x = tokens.embedding(&self.parts.embed)?;
        let x = if self.parts.embed.dtype().is_float() && x.dtype() != self.parts.dtype {
            x.to_dtype(self.parts.dtype)?
        } else {
            x
        };
        match self.parts.embed_scale {
            Some(s) => x.scale(s),
            None => Ok(x),
        }
    }

    /// Final norm and head: f32 logits.
    fn logits(&self, x: &Tensor) -> Result<Tensor> {
        self.parts.lm_head.forward(&self.parts.norm.forward(x)?)?.to_dtype(DType::F32)
    }

    fn run(&self, tokens: &Tensor, cache: &mut KvCache, mask: Option<&Tensor>, last_only: bool) -> Result<Tensor> {
        let p = &self.parts;
        let (offset, t) = (cache.offset(), tokens.dim(1));
        let mut x = self.embed(tokens)?;
        let angles =
            p.ropes.iter().map(|r| r.angles(tokens.backend(), offset, t)).collect::<Result<Vec<RopeAngles>>>()?;
        for (i, layer) in p.layers.iter().enumerate() {
            let _span = tracing::trace_span!("layer", i).entered();
            let mut kv = KvTarget::One { cache: cache.layer(i)?, mask };
            x = layer.forward(&x, &angles[p.layer_rope[i]], &mut kv)?;
        }
        if last_only {
            x = x.narrow(1, t - 1, 1)?;
        }
        self.logits(&x)
    }

    /// `tokens` (1, total): `lens[i]` new tokens for `caches[i]`, back to back, through every
    /// layer: the hidden states before the final norm, (1, total, hidden).
    fn layers_packed(&self, tokens: &Tensor, lens: &[usize], caches: &mut [KvCache]) -> Result<Tensor> {
        let p = &self.parts;
        check_packed(tokens, lens, caches.len())?;
        let backend = tokens.backend();
        // Each row's absolute position: its sequence's cache offset onwards.
        let positions: Vec<usize> =
            lens.iter().zip(caches.iter()).flat_map(|(&len, c)| c.offset()..c.offset() + len).collect();
        let angles = p
            .ropes
            .iter()
            .map(|r| r.angles_at(backend, positions.iter().copied()))
            .collect::<Result<Vec<RopeAngles>>>()?;
        let mut x = self.embed(tokens)?;
        for (i, layer) in p.layers.iter().enumerate() {
            let _span = tracing::trace_span!("layer", i, packed = lens.len()).entered();
            let layer_caches = caches.iter_mut().map(|c| c.layer(i)).collect::<Result<Vec<_>>>()?;
            let mut kv = KvTarget::Packed { lens, caches: layer_caches };
            x = layer.forward(&x, &angles[p.layer_rope[i]], &mut kv)?;
        }
        Ok(x)
    }

    /// [`Self::layers_packed`], then logits of each sequence's last row, (sequences, vocab).
    fn run_packed(&self, tokens: &Tensor, lens: &[usize], caches: &mut [KvCache]) -> Result<Tensor> {
        let x = self.layers_packed(tokens, lens, caches)?;
        // Only each sequence's last row goes through the head.
        let last: Vec<u32> = lens
            .iter()
            .scan(0usize, |end, &len| {
                *end += len;
                Some((*end - 1) as u32)
            })
            .collect();
        let x = x.index_select(&Tensor::from_u32(tokens.backend(), &last, &[last.len()])?, 1)?;
        let logits = self.logits(&x)?;
        let vocab = logits.dim(-1);
        logits.reshape(&[lens.len(), vocab])
    }

    /// The final hidden states (after the final norm, no head) of every row of a packed batch,
    /// f32 (1, total, hidden): what an embedding model pools. Each sequence attends only to its
    /// own rows and cache, so a batch needs no padding.
    pub fn hidden_states_packed(&self, tokens: &Tensor, lens: &[usize], caches: &mut [KvCache]) -> Result<Tensor> {
        let x = self.layers_packed(tokens, lens, caches)?;
        self.parts.norm.forward(&x)?.to_dtype(DType::F32)
    }

    /// A fresh cache per sequence of a batch (unbounded, each layer's window kept).
    pub fn fresh_caches(&self, sequences: usize) -> Vec<KvCache> {
        (0..sequences).map(|_| self.cache(0)).collect()
    }

    /// A cache bounded by `context_len` (0: the model's own bounds). A user bound applies to
    /// every layer; sliding layers keep their own window.
    fn cache(&self, context_len: usize) -> KvCache {
        let windows = self.parts.layer_windows.iter().map(|&w| match (w, context_len) {
            (0, c) => c,
            (w, 0) => w,
            (w, c) => w.min(c),
        });
        KvCache::new(windows)
    }
}

impl CausalLm for CausalDecoder {
    fn info(&self) -> ModelInfo {
        self.parts.info.clone()
    }

    fn new_cache(&self, context_len: usize) -> RResult<KvCache, FfiError> {
        ffi_result("new_cache", || Ok(self.cache(context_len)))
    }

    fn forward(
        &self,
        tokens: &Tensor,
        cache: &mut KvCache,
        mask: ROption<&Tensor>,
        last_only: bool,
    ) -> RResult<Tensor, FfiError> {
        ffi_result("forward", || self.run(tokens, cache, mask.into_option(), last_only))
    }

    fn forward_packed(
        &self,
        tokens: &Tensor,
        lens: RSlice<'_, usize>,
        caches: RSliceMut<'_, KvCache>,
    ) -> RResult<Tensor, FfiError> {
        let mut caches = caches;
        ffi_result("forward_packed", || self.run_packed(tokens, lens.as_slice(), caches.as_mut_slice()))
    }
}
