//! The text decoder (transformers `VoxtralRealtimeTextModel` + tied `lm_head`): a Mistral decoder
//! whose FFN input is scaled by a time condition:
//!
//! ```text
//! x -> RMSNorm -> GQA self-attention (RoPE, sliding window) -> +
//!   -> RMSNorm -> * (1 + Linear(GELU(Linear(t_cond)))) -> SwiGLU -> +
//! ... -> RMSNorm -> lm_head (tied to the embeddings)
//! ```
//!
//! `t_cond` is a sinusoidal embedding of the number of delay tokens, constant for a session, so
//! each layer's `1 + ada(t_cond)` is computed once per session ([`TextDecoder::ada_scales`]).

use infer_core::{Backend, DType, KvCache, Result, RopeLayout, Tensor, Weights};
use infer_layers::{AttentionConfig, BlockConfig, DecoderBlock, KvTarget, Linear, MlpConfig, RmsNorm, Rotary};

use crate::config::DecoderParams;

/// A layer's time condition `Linear(GELU(Linear(t_cond)))`, next to its block.
struct AdaScale {
    down: Linear,
    up: Linear,
}

pub struct TextDecoder {
    embed_tokens: Tensor,
    layers: Vec<DecoderBlock>,
    ada: Vec<AdaScale>,
    norm: RmsNorm,
    lm_head: Tensor,
    rotary: Rotary,
    params: DecoderParams,
    /// The compute dtype.
    dtype: DType,
}

impl TextDecoder {
    /// `w` is the checkpoint under `language_model`.
    pub fn load(w: &Weights, p: &DecoderParams, rope: RopeLayout) -> Result<Self> {
        let m = w.prefixed("model");
        // Tied in the real checkpoint (no lm_head stored): the one table is the head, a
        // product every step, so it is quantized with the linears, to 8 bits whatever their
        // format (as llama.cpp keeps its 4-bit models' output matrix at 6-8 bits); rows are
        // looked up from the blocks. An untied head is a linear like the others.
        let tied = !w.contains("lm_head.weight");
        let head_quant = w.linear_quant().map(|_| DType::Q8_0).filter(|_| tied);
        let embed_tokens = m.with_linear_quant(head_quant)?.get_linear("embed_tokens.weight", p.vocab, p.hidden)?;
        let lm_head = if tied { embed_tokens.clone() } else { w.get_linear("lm_head.weight", p.vocab, p.hidden)? };
        let attention = AttentionConfig::new(p.hidden, p.heads, p.kv_heads, p.head_dim).window(p.window);
        let block = BlockConfig::new(attention, MlpConfig::new(p.hidden, p.intermediate), p.rms_eps);
        let ada = (0..p.layers)
            .map(|i| {
                let a = m.prefixed(format!("layers.{i}.ada_rms_norm"));
                Ok(AdaScale {
                    down: Linear::load(&a.prefixed("linear1"), p.ada_dim, p.hidden, false)?,
                    up: Linear::load(&a.prefixed("linear2"), p.hidden, p.ada_dim, false)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(TextDecoder {
            embed_tokens,
            layers: DecoderBlock::load_stack(&m, p.layers, |_| block.clone())?,
            ada,
            norm: RmsNorm::load(&m.prefixed("norm"), p.hidden, p.rms_eps)?,
            lm_head,
            rotary: Rotary::new(p.head_dim, p.rope_theta, rope, w.dtype())?,
            params: p.clone(),
            dtype: w.dtype(),
        })
    }

    pub fn vocab(&self) -> usize {
        self.params.vocab
    }

    /// A KV cache for one stream: each layer keeps its sliding window (all positions if none).
    pub fn start(&self) -> KvCache {
        KvCache::uniform(self.params.layers, self.params.window)
    }

    /// Token embeddings `(1, t, hidden)`.
    pub fn embed(&self, ids: &[u32]) -> Result<Tensor> {
        let ids = Tensor::from_u32(self.embed_tokens.backend(), ids, &[1, ids.len()])?;
        let x = ids.embedding(&self.embed_tokens)?;
        // Rows of a quantized table come out as f32.
        if x.dtype() == self.dtype {
            Ok(x)
        } else {
            x.to_dtype(self.dtype)
        }
    }

    /// Each layer's FFN scale `1 + ada(t_cond)` for `delay_tokens`, shaped `(1, 1, hidden)`.
    pub fn ada_scales(&self, backend: &Backend, dtype: DType, delay_tokens: usize) -> Result<Vec<Tensor>> {
        let t_cond = time_embedding(delay_tokens as f32, self.params.hidden);
        let t_cond = Tensor::from_f32(backend, &t_cond, &[1, 1, self.params.hidden])?.to_dtype(dtype)?;
        self.ada.iter().map(|a| a.up.forward(&a.down.forward(&t_cond)?.gelu_erf()?)?.affine(1.0, 1.0)).collect()
    }

    /// Input embeddings `(1, t, hidden)` at the cache's next positions -> logits `(vocab,)` of
    /// the last one, as f32 on the host.
    pub fn forward(&self, x: &Tensor, cache: &mut KvCache, scales: &[Tensor]) -> Result<Vec<f32>> {
        let t = x.dim(1);
        let rope = self.rotary.angles(x.backend(), cache.offset(), t)?;
        let mut x = x.clone();
        for (i, (layer, scale)) in self.layers.iter().zip(scales).enumerate() {
            let mut kv = KvTarget::One { cache: cache.layer(i)?, mask: None };
            x = layer.forward_scaled(&x, &rope, &mut kv, Some(scale))?;
        }
        let last = x.narrow(1, t - 1, 1)?;
        let logits = self.norm.forward(&last)?.linear(&self.lm_head, None)?;
        logits.to_dtype(DType::F32)?.to_vec_f32()
    }
}

/// transformers `VoxtralRealtimeTimeEmbedding`: `[cos(t·f), sin(t·f)]` with
/// `f_i = exp(-ln(10000) · i / (dim/2))`, in f32 as the reference computes it.
pub fn time_embedding(t: f32, dim: usize) -> Vec<f32> {
    let half = dim / 2;
    let scale = -(10_000f64.ln()) as f32;
    let freqs: Vec<f32> = (0..half).map(|i| (scale * i as f32 / half as f32).exp()).collect();
    let mut out: Vec<f32> = freqs.iter().map(|f| (t * f).cos()).collect();
    out.extend(freqs.iter().map(|f| (t * f).sin()));
    out
}
