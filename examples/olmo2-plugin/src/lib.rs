//! OLMo 2 (transformers `modeling_olmo2.py`) as an out-of-tree plugin. What differs from Llama:
//!
//! ```text
//! x = x + post_attention_layernorm(attn(x))     post-norm: the norm is on the sublayer's output,
//! x = x + post_feedforward_layernorm(mlp(x))    before the residual add; no norm before either
//! attn: q = q_norm(q_proj(x)), k = k_norm(k_proj(x))   RMSNorm over the whole projection, then
//!       the head split and RoPE (Qwen3 normalises each head instead)
//! ```
//!
//! Everything else (GQA, split-half RoPE, SwiGLU, an untied head) is the shared Llama-like decoder
//! of `infer-layers`, batched `forward_packed` included.

use std::path::Path;

use infer_layers::llama_like::build;
use infer_layers::{
    read_config, rope_theta, BlockNames, CausalDecoder, HParams, NormPlacement, ProjectionBias, QkNorm, QkNormScope,
    Rotary,
};
use infer_sdk::plugin::{Architecture, TextGeneration};
use infer_sdk::{Backend, ModelLoadOptions, Result, RopeLayout, Weights};
use serde::Deserialize;

/// config.json of `Olmo2ForCausalLM`.
#[derive(Debug, Deserialize)]
struct Olmo2Config {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    rope_parameters: Option<serde_json::Value>,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default)]
    attention_bias: bool,
}

fn default_eps() -> f64 {
    1e-5
}

impl Olmo2Config {
    fn hparams(&self) -> HParams {
        HParams {
            vocab_size: self.vocab_size,
            hidden: self.hidden_size,
            intermediate: self.intermediate_size,
            layers: self.num_hidden_layers,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            // OLMo 2 configs have no head_dim.
            head_dim: self.hidden_size.checked_div(self.num_attention_heads).unwrap_or(0),
            max_positions: self.max_position_embeddings,
            rms_eps: self.rms_norm_eps,
            rope_theta: rope_theta(self.rope_theta, self.rope_parameters.as_ref(), 10_000.0),
            tie_embeddings: self.tie_word_embeddings,
        }
    }
}

fn load(dir: &Path, backend: &Backend, opts: &ModelLoadOptions) -> Result<CausalDecoder> {
    opts.refuse_quant("olmo2")?;
    let cfg: Olmo2Config = read_config(dir)?;
    let hp = cfg.hparams();
    let w = Weights::from_dir(dir, backend, opts.dtype)?;
    let rotary = Rotary::new(hp.head_dim, hp.rope_theta, RopeLayout::SplitHalf, opts.dtype)?;
    let qk_norm = QkNorm::per_head_rms(hp.rms_eps).scope(QkNormScope::Projection);
    // `attention_bias` puts a bias on all four projections.
    let bias = if cfg.attention_bias { ProjectionBias::ALL } else { ProjectionBias::default() };
    build("olmo2", &hp, rotary, &w, opts, |_| {
        hp.block()
            .attention(|a| a.bias(bias).qk_norm(Some(qk_norm)))
            .placement(NormPlacement::Post)
            .names(BlockNames::GEMMA)
    })
}

infer_sdk::register_model! {
    name: "olmo2",
    description: "OLMo 2 decoder (example out-of-tree plugin; safetensors)",
    architectures: [Architecture::named("olmo2")],
    kinds: [TextGeneration => load],
}

infer_sdk::export_plugin_library!();
