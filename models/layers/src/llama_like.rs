//! The assembly of a Llama-like decoder (Llama, Qwen2, Qwen3, Mistral...) from hyperparameters:
//! blocks of [`HParams::block`] (an architecture changes what differs), an embedding table, a
//! final RMSNorm and a head tied to the embeddings or not.
//!
//! ```text
//! x + attn(rms(x)) -> x + mlp(rms(x))          (attn: GQA, RoPE, optional qkv bias / qk norm)
//! ```

use infer_sdk::{ModelInfo, ModelLoadOptions, Result, Tensor, Weights};

use crate::{
    AttentionConfig, BlockConfig, CausalDecoder, DecoderBlock, DecoderLayer, DecoderParts, HParams, Linear, MlpConfig,
    Norm, NormKind, Rotary,
};

impl HParams {
    /// The Llama block of these sizes: pre-norm RMSNorm, GQA without biases or q/k norm,
    /// scale `1/sqrt(head_dim)`, SwiGLU.
    pub fn block(&self) -> BlockConfig {
        BlockConfig::new(
            AttentionConfig::new(self.hidden, self.heads, self.kv_heads, self.head_dim),
            MlpConfig::new(self.hidden, self.intermediate),
            self.rms_eps,
        )
    }
}

/// A decoder of `hp.layers` blocks under `model.layers.{i}`, block `i` configured by `block(i)`
/// (its attention window is its cache's), one `rotary` for every layer. A bare decoder saved
/// without its head (transformers' `Qwen3Model`: `layers.{i}`, `embed_tokens`, `norm` at the
/// root) loads too, its head tied to the embeddings.
pub fn build(
    architecture: &str,
    hp: &HParams,
    rotary: Rotary,
    w: &Weights,
    opts: &ModelLoadOptions,
    block: impl Fn(usize) -> BlockConfig,
) -> Result<CausalDecoder> {
    let bare = !w.contains("model.embed_tokens.weight") && w.contains("embed_tokens.weight");
    let m = if bare { w.clone() } else { w.prefixed("model") };
    let configs: Vec<BlockConfig> = (0..hp.layers).map(block).collect();
    let layer_windows = configs.iter().map(|c| c.attention.window).collect();
    let layers = DecoderBlock::load_stack(&m, hp.layers, |i| configs[i].clone())?
        .into_iter()
        .map(|b| Box::new(b) as Box<dyn DecoderLayer>)
        .collect();
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
        info: model_info(architecture, hp, &embed, opts),
        embed,
        dtype: opts.dtype,
        embed_scale: None,
        layers,
        layer_windows,
        norm: Norm::load(&m.prefixed("norm"), NormKind::RMS, hp.hidden, hp.rms_eps)?,
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
