//! The decoder-only skeleton every LLM architecture shares:
//! `embed -> layers -> final norm -> lm_head`, implementing the core `CausalLm` contract.
//! An architecture file supplies its layers and weights; this file owns the plumbing.

use abi_stable::std_types::{ROption, RResult};
use infer_core::{backend::ffi_result, CausalLm, DType, FfiError, KvCache, LayerCache, ModelInfo, Result, Tensor};

use infer_layers::{Linear, RmsNorm, RopeAngles, Rotary};

/// One transformer block.
pub trait DecoderLayer: Send + Sync {
    fn forward(&self, x: &Tensor, rope: &RopeAngles, cache: &mut LayerCache, mask: Option<&Tensor>) -> Result<Tensor>;
}

pub struct DecoderParts {
    pub info: ModelInfo,
    /// (vocab, hidden) token embeddings.
    pub embed: Tensor,
    /// Multiplies embeddings (Gemma: sqrt(hidden)).
    pub embed_scale: Option<f64>,
    pub layers: Vec<Box<dyn DecoderLayer>>,
    /// Per-layer sliding window for its cache (0: global).
    pub layer_windows: Vec<usize>,
    pub norm: RmsNorm,
    pub lm_head: Linear,
    /// The rotary embeddings in use (Gemma 3 has a local and a global one).
    pub ropes: Vec<Rotary>,
    /// Which of `ropes` each layer uses.
    pub layer_rope: Vec<usize>,
}

pub struct CausalDecoder {
    parts: DecoderParts,
}

impl CausalDecoder {
    pub fn new(parts: DecoderParts) -> Self {
        CausalDecoder { parts }
    }

    fn run(&self, tokens: &Tensor, cache: &mut KvCache, mask: Option<&Tensor>, last_only: bool) -> Result<Tensor> {
        let p = &self.parts;
        let (offset, t) = (cache.offset(), tokens.dim(1));
        let mut x = tokens.embedding(&p.embed)?;
        if let Some(s) = p.embed_scale {
            x = x.scale(s)?;
        }
        let angles =
            p.ropes.iter().map(|r| r.angles(tokens.backend(), offset, t)).collect::<Result<Vec<RopeAngles>>>()?;
        for (i, layer) in p.layers.iter().enumerate() {
            let _span = tracing::trace_span!("layer", i).entered();
            x = layer.forward(&x, &angles[p.layer_rope[i]], cache.layer(i)?, mask)?;
        }
        if last_only {
            x = x.narrow(1, t - 1, 1)?;
        }
        let x = p.norm.forward(&x)?;
        p.lm_head.forward(&x)?.to_dtype(DType::F32)
    }
}

impl CausalLm for CausalDecoder {
    fn info(&self) -> ModelInfo {
        self.parts.info.clone()
    }

    fn new_cache(&self, context_len: usize) -> RResult<KvCache, FfiError> {
        ffi_result("new_cache", || {
            // A user bound applies to every layer; sliding layers keep their own window.
            let windows = self.parts.layer_windows.iter().map(|&w| match (w, context_len) {
                (0, c) => c,
                (w, 0) => w,
                (w, c) => w.min(c),
            });
            Ok(KvCache::new(windows))
        })
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
}
