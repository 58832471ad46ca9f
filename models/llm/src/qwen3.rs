//! Qwen3: a pre-norm decoder with grouped-query attention, per-head q/k RMSNorm before RoPE,
//! and a SwiGLU MLP (transformers' `modeling_qwen3.py`).
//!
//! ```text
//! tokens -> embed -> [ x + attn(norm(x)) ; x + mlp(norm(x)) ] x L -> norm -> lm_head -> logits
//! ```

use std::path::Path;

use infer_core::{ModelInfo, ModelLoadOptions, Result, Tensor, Weights};
use serde::Deserialize;

use crate::attention::{AttentionConfig, SelfAttention};
use crate::config::{read_config, rope_theta};
use crate::decoder::{CausalDecoder, DecoderLayer, DecoderParts};
use crate::layers::{Linear, RmsNorm, Rotary, SwiGlu};

#[derive(Debug, Clone, Deserialize)]
pub struct Qwen3Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: Option<usize>,
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: Option<f64>,
    pub rope_parameters: Option<serde_json::Value>,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub attention_bias: bool,
}

impl Qwen3Config {
    fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads)
    }
}

struct Block {
    input_norm: RmsNorm,
    attn: SelfAttention,
    post_attn_norm: RmsNorm,
    mlp: SwiGlu,
}

impl DecoderLayer for Block {
    fn forward(
        &self,
        x: &Tensor,
        rope: &Rotary,
        cache: &mut infer_core::LayerCache,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let h = self.attn.forward(&self.input_norm.forward(x)?, rope, cache, mask)?;
        let x = x.add(&h)?;
        x.add(&self.mlp.forward(&self.post_attn_norm.forward(&x)?)?)
    }
}

pub fn load(dir: &Path, backend: &infer_core::Backend, opts: &ModelLoadOptions) -> Result<CausalDecoder> {
    let cfg: Qwen3Config = read_config(dir)?;
    let w = Weights::from_dir(dir, backend, opts.dtype)?;
    let head_dim = cfg.head_dim();
    let hidden = cfg.hidden_size;
    let m = w.pp("model");

    let layers = (0..cfg.num_hidden_layers)
        .map(|i| {
            let l = m.pp(format!("layers.{i}"));
            let attn = AttentionConfig {
                hidden,
                num_heads: cfg.num_attention_heads,
                num_kv_heads: cfg.num_key_value_heads,
                head_dim,
                qkv_bias: cfg.attention_bias,
                qk_norm_eps: Some(cfg.rms_norm_eps),
                scale: 1.0 / (head_dim as f32).sqrt(),
                window: 0,
            };
            Ok(Box::new(Block {
                input_norm: RmsNorm::load(&l.pp("input_layernorm"), hidden, cfg.rms_norm_eps)?,
                attn: SelfAttention::load(&l.pp("self_attn"), attn)?,
                post_attn_norm: RmsNorm::load(&l.pp("post_attention_layernorm"), hidden, cfg.rms_norm_eps)?,
                mlp: SwiGlu::load(&l.pp("mlp"), hidden, cfg.intermediate_size, false)?,
            }) as Box<dyn DecoderLayer>)
        })
        .collect::<Result<Vec<_>>>()?;

    let embed = m.get_shaped("embed_tokens.weight", &[cfg.vocab_size, hidden])?;
    let lm_head = if cfg.tie_word_embeddings || !w.contains("lm_head.weight") {
        Linear::from_weight(embed.clone())
    } else {
        Linear::load(&w.pp("lm_head"), cfg.vocab_size, hidden, false)?
    };
    let theta = rope_theta(cfg.rope_theta, cfg.rope_parameters.as_ref(), 1_000_000.0);
    let info = ModelInfo {
        architecture: "qwen3".into(),
        vocab_size: cfg.vocab_size,
        num_layers: cfg.num_hidden_layers,
        hidden_size: hidden,
        num_heads: cfg.num_attention_heads,
        num_kv_heads: cfg.num_key_value_heads,
        head_dim,
        max_position_embeddings: cfg.max_position_embeddings,
        quant_bits: 0,
        quant_group: 0,
        dtype: opts.dtype.name().into(),
    };
    Ok(CausalDecoder::new(DecoderParts {
        info,
        embed,
        embed_scale: None,
        layers,
        layer_windows: vec![0; cfg.num_hidden_layers],
        norm: RmsNorm::load(&m.pp("norm"), hidden, cfg.rms_norm_eps)?,
        lm_head,
        rope: Rotary::new(&w, head_dim, theta, cfg.max_position_embeddings, opts.dtype)?,
    }))
}
