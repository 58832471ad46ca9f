//! The Qwen3 decoder stack the talker and the code predictor share, fed with embeddings rather
//! than token ids:
//!
//! ```text
//! x -> [x + attn(rms(x)) -> x + swiglu(rms(x))] x N -> rms -> hidden states
//! ```
//! (attention: GQA, per-head q/k RMSNorm, split-half RoPE).
//!
//! Qwen3-TTS's talker declares multimodal RoPE (`mrope_section`), but speech prompts carry the
//! same position in all three sections, so it reduces to this ordinary RoPE.

use infer_core::{KvCache, Result, RopeLayout, Tensor, Weights};
use infer_layers::{
    AttentionConfig, BlockConfig, DecoderBlock, KvTarget, MlpConfig, QkNorm, RmsNorm, RopeAngles, Rotary,
};

use crate::config::DecoderDims;

pub struct EmbedDecoder {
    blocks: Vec<DecoderBlock>,
    norm: RmsNorm,
    rotary: Rotary,
    /// The angles of the first positions, computed once ([`EmbedDecoder::with_angle_table`]).
    table: Option<RopeAngles>,
}

impl EmbedDecoder {
    /// `w` is rooted at the decoder (`talker.model`, `talker.code_predictor.model`).
    pub fn load(w: &Weights, d: &DecoderDims) -> Result<Self> {
        let head_dim = d.head_dim();
        let attention = AttentionConfig::new(d.hidden_size, d.num_attention_heads, d.num_key_value_heads, head_dim)
            .qkv_bias(d.attention_bias)
            .qk_norm(Some(QkNorm::per_head_rms(d.rms_norm_eps)));
        let block = BlockConfig::new(attention, MlpConfig::new(d.hidden_size, d.intermediate_size), d.rms_norm_eps);
        Ok(EmbedDecoder {
            blocks: DecoderBlock::load_stack(w, d.num_hidden_layers, |_| block.clone())?,
            norm: RmsNorm::load(&w.prefixed("norm"), d.hidden_size, d.rms_norm_eps)?,
            rotary: Rotary::new(head_dim, d.rope_theta, RopeLayout::SplitHalf, w.dtype())?,
            table: None,
        })
    }

    /// Keeps the RoPE angles of positions `0..positions` for every forward that stays within
    /// them: the code predictor runs the same 16 positions every frame.
    pub fn with_angle_table(mut self, backend: &infer_core::Backend, positions: usize) -> Result<Self> {
        self.table = Some(self.rotary.angles(backend, 0, positions)?);
        Ok(self)
    }

    pub fn new_cache(&self) -> KvCache {
        KvCache::uniform(self.blocks.len(), 0)
    }

    /// `x` (1, t, hidden) at the cache's next positions -> final-normed hidden states (1, t, hidden).
    pub fn forward(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let (offset, len) = (cache.offset(), x.dim(1));
        let angles = match &self.table {
            Some(t) if offset + len <= t.len() => t.narrow(offset, len)?,
            _ => self.rotary.angles(x.backend(), offset, len)?,
        };
        let mut x = x.clone();
        for (i, b) in self.blocks.iter().enumerate() {
            x = b.forward(&x, &angles, &mut KvTarget::One { cache: cache.layer(i)?, mask: None })?;
        }
        self.norm.forward(&x)
    }
}
