//! Qwen3 (transformers `modeling_qwen3.py`): the Llama-like pre-norm decoder with per-head q/k
//! RMSNorm before RoPE and no biases. Split-half RoPE in both the HF and the GGUF layout.

use std::path::Path;

use infer_core::{Backend, ModelLoadOptions, Result, RopeLayout};
use serde::Deserialize;

use infer_layers::llama_like::build;
use infer_layers::{gguf_name, read_config, rope_theta, CausalDecoder, Checkpoint, HParams, QkNorm, Rotary};

/// config.json of `Qwen3ForCausalLM` (also read for Qwen2, whose fields are the same).
#[derive(Debug, Clone, Deserialize)]
pub struct QwenConfig {
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
}

impl QwenConfig {
    pub fn hparams(&self) -> HParams {
        HParams {
            vocab_size: self.vocab_size,
            hidden: self.hidden_size,
            intermediate: self.intermediate_size,
            layers: self.num_hidden_layers,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim.unwrap_or(self.hidden_size.checked_div(self.num_attention_heads).unwrap_or(0)),
            max_positions: self.max_position_embeddings,
            rms_eps: self.rms_norm_eps,
            rope_theta: rope_theta(self.rope_theta, self.rope_parameters.as_ref(), 1_000_000.0),
            tie_embeddings: self.tie_word_embeddings,
        }
    }
}

/// Hyperparameters of a Qwen-style checkpoint, HF directory or GGUF.
pub fn qwen_hparams(ckpt: &Checkpoint, arch: &str) -> Result<HParams> {
    match ckpt {
        Checkpoint::Dir(dir) => Ok(read_config::<QwenConfig>(dir)?.hparams()),
        Checkpoint::Gguf(g) => HParams::from_gguf(g, arch),
    }
}

pub fn load(path: &Path, backend: &Backend, opts: &ModelLoadOptions) -> Result<CausalDecoder> {
    let ckpt = Checkpoint::open(path)?;
    let hp = qwen_hparams(&ckpt, "qwen3")?;
    let w = ckpt.weights(backend, opts.dtype, gguf_name)?;
    let rotary = Rotary::new(hp.head_dim, hp.rope_theta, RopeLayout::SplitHalf, opts.dtype)?;
    let qk_norm = QkNorm::per_head_rms(hp.rms_eps);
    build("qwen3", &hp, rotary, &w, opts, |_| hp.block().attention(|a| a.qk_norm(Some(qk_norm))))
}
