//! The pre-norm decoder block Qwen2, Qwen3 and Llama 3 share, and the assembly of a model from
//! hyperparameters; each architecture file states only what differs.
//!
//! ```text
//! x + attn(rms(x)) -> x + mlp(rms(x))          (attn: GQA, RoPE, optional qkv bias / qk norm)
//! ```

use infer_core::{ModelInfo, ModelLoadOptions, Result, Tensor, Weights};

use crate::causal_decoder::{CausalDecoder, DecoderLayer, DecoderParts};
use crate::hparams::HParams;
use infer_layers::{AttentionConfig, KvTarget, Linear, RmsNorm, RopeAngles, Rotary, SelfAttention, SwiGlu};

/// What distinguishes the family members.
pub struct Flavor {
    pub architecture: &'static str,
    /// q/k/v projections carry biases (Qwen2).
    pub qkv_bias: bool,
    /// Per-head RMSNorm of q and k before RoPE (Qwen3).
    pub qk_norm: bool,
}

struct Block {
    input_norm: RmsNorm,
    attn: SelfAttention,
    post_attn_norm: RmsNorm,
    mlp: SwiGlu,
}

impl DecoderLayer for Block {
    fn forward(&self, x: &Tensor, rope: &RopeAngles, kv: &mut KvTarget<'_>) -> Result<Tensor> {
        let h = self.attn.forward_kv(&self.input_norm.forward(x)?, rope, kv)?;
        let x = x.add(&h)?;
        x.add(&self.mlp.forward(&self.post_attn_norm.forward(&x)?)?)
    }
}

pub fn build(
    hp: &HParams,
    flavor: &Flavor,
    rotary: Rotary,
    w: &Weights,
    opts: &ModelLoadOptions,
) -> Result<CausalDecoder> {
    let m = w.prefixed("model");
    let layers = (0..hp.layers)
        .map(|i| {
            let l = m.prefixed(format!("layers.{i}"));
            let attn = AttentionConfig {
                hidden: hp.hidden,
                num_heads: hp.heads,
                num_kv_heads: hp.kv_heads,
                head_dim: hp.head_dim,
                qkv_bias: flavor.qkv_bias,
                qk_norm_eps: flavor.qk_norm.then_some(hp.rms_eps),
                qk_norm_offset: 0.0,
                scale: 1.0 / (hp.head_dim as f32).sqrt(),
                window: 0,
                softcap: 0.0,
            };
            Ok(Box::new(Block {
                input_norm: RmsNorm::load(&l.prefixed("input_layernorm"), hp.hidden, hp.rms_eps)?,
                attn: SelfAttention::load(&l.prefixed("self_attn"), attn)?,
                post_attn_norm: RmsNorm::load(&l.prefixed("post_attention_layernorm"), hp.hidden, hp.rms_eps)?,
                mlp: SwiGlu::load(&l.prefixed("mlp"), hp.hidden, hp.intermediate, false)?,
            }) as Box<dyn DecoderLayer>)
        })
        .collect::<Result<Vec<_>>>()?;
    let shape = [hp.vocab_size, hp.hidden];
    let (embed, lm_head) = if hp.tie_embeddings || !w.contains("lm_head.weight") {
        let embed = m.get_shaped("embed_tokens.weight", &shape)?;
        (embed.clone(), Linear::from_weight(embed))
    } else {
        // Untied (Llama 3 8B: 1 GB of bf16): a lookup table, left in the file's pages where
        // the backend can.
        let embed = m.get_table("embed_tokens.weight", &shape)?;
        (embed, Linear::load(&w.prefixed("lm_head"), hp.vocab_size, hp.hidden, false)?)
    };
    Ok(CausalDecoder::new(DecoderParts {
        info: model_info(flavor.architecture, hp, &embed, opts),
        embed,
        dtype: opts.dtype,
        embed_scale: None,
        layers,
        layer_windows: vec![0; hp.layers],
        norm: RmsNorm::load(&m.prefixed("norm"), hp.hidden, hp.rms_eps)?,
        lm_head,
        ropes: vec![rotary],
        layer_rope: vec![0; hp.layers],
    }))
}

/// `ModelInfo` from hyperparameters; quantization read off the embedding table's dtype.
pub fn model_info(architecture: &str, hp: &HParams, embed: &Tensor, opts: &ModelLoadOptions) -> ModelInfo {
    let (per_block, bytes) = embed.dtype().block();
    let (bits, group) =
        if embed.dtype().is_quantized() { ((bytes * 8 / per_block) as u32, per_block as u32) } else { (0, 0) };
    ModelInfo {
        architecture: architecture.into(),
        vocab_size: hp.vocab_size,
        num_layers: hp.layers,
        hidden_size: hp.hidden,
        num_heads: hp.heads,
        num_kv_heads: hp.kv_heads,
        head_dim: hp.head_dim,
        max_position_embeddings: hp.max_positions,
        quant_bits: bits,
        quant_group: group,
        dtype: opts.dtype.name().into(),
    }
}
