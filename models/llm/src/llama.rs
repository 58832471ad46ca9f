//! Llama 3 (transformers `modeling_llama.py`): the pre-norm decoder without biases, with llama3
//! RoPE frequency scaling. llama.cpp's converter permutes q/k rows of `llama` GGUFs so that its
//! interleaved RoPE reproduces HF's split-half one; GGUF weights therefore use the interleaved
//! layout here, and the scaling comes precomputed as `rope_freqs.weight`.

use std::path::Path;

use infer_core::{Backend, Error, ModelLoadOptions, Result, RopeLayout};
use serde::Deserialize;

use infer_layers::llama_like::build;
use infer_layers::{gguf_name, read_config, rope_theta, CausalDecoder, Checkpoint, HParams, Llama3Scaling, Rotary};

#[derive(Debug, Clone, Deserialize)]
struct LlamaConfig {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    max_position_embeddings: usize,
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    /// transformers 4.x
    rope_scaling: Option<serde_json::Value>,
    /// transformers 5.x (holds rope_theta and the scaling)
    rope_parameters: Option<serde_json::Value>,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
}

/// The llama3 scaling block of the config, if that is its type.
fn llama3_scaling(v: Option<&serde_json::Value>, path: &Path) -> Result<Option<Llama3Scaling>> {
    let Some(v) = v else { return Ok(None) };
    let kind = v.get("rope_type").or_else(|| v.get("type")).and_then(|t| t.as_str()).unwrap_or("default");
    match kind {
        "default" => Ok(None),
        "llama3" => {
            let num = |k: &str| {
                v.get(k)
                    .and_then(|x| x.as_f64())
                    .ok_or_else(|| Error::config(path, format!("rope scaling: missing field {k}")))
            };
            Ok(Some(Llama3Scaling {
                factor: num("factor")? as f32,
                low_freq_factor: num("low_freq_factor")? as f32,
                high_freq_factor: num("high_freq_factor")? as f32,
                original_max_position: num("original_max_position_embeddings")? as usize,
            }))
        }
        other => Err(Error::config(path, format!("rope scaling type `{other}` is not supported (llama3 is)"))),
    }
}

pub fn load(path: &Path, backend: &Backend, opts: &ModelLoadOptions) -> Result<CausalDecoder> {
    let ckpt = Checkpoint::open(path)?;
    match &ckpt {
        Checkpoint::Dir(dir) => {
            let c: LlamaConfig = read_config(dir)?;
            let cfg_path = dir.join("config.json");
            if c.attention_bias || c.mlp_bias {
                return Err(Error::config(&cfg_path, "attention_bias / mlp_bias Llama variants are not supported"));
            }
            let hp = HParams {
                vocab_size: c.vocab_size,
                hidden: c.hidden_size,
                intermediate: c.intermediate_size,
                layers: c.num_hidden_layers,
                heads: c.num_attention_heads,
                kv_heads: c.num_key_value_heads.unwrap_or(c.num_attention_heads),
                head_dim: c.head_dim.unwrap_or(c.hidden_size.checked_div(c.num_attention_heads).unwrap_or(0)),
                max_positions: c.max_position_embeddings,
                rms_eps: c.rms_norm_eps,
                rope_theta: rope_theta(c.rope_theta, c.rope_parameters.as_ref(), 500_000.0),
                tie_embeddings: c.tie_word_embeddings,
            };
            let scaling = llama3_scaling(c.rope_scaling.as_ref().or(c.rope_parameters.as_ref()), &cfg_path)?;
            let mut rotary = Rotary::new(hp.head_dim, hp.rope_theta, RopeLayout::SplitHalf, opts.dtype)?;
            if let Some(s) = &scaling {
                rotary = rotary.llama3_scaled(s);
            }
            let w = ckpt.weights(backend, opts.dtype, gguf_name)?;
            build("llama", &hp, rotary, &w, opts, |_| hp.block())
        }
        Checkpoint::Gguf(g) => {
            let hp = HParams::from_gguf(g, "llama")?;
            let w = ckpt.weights(backend, opts.dtype, gguf_name)?;
            let mut rotary = Rotary::new(hp.head_dim, hp.rope_theta, RopeLayout::Interleaved, opts.dtype)?;
            if w.contains("rope_freqs.weight") {
                rotary = rotary.with_freq_factors(&w.get("rope_freqs.weight")?.to_vec_f32()?);
            }
            build("llama", &hp, rotary, &w, opts, |_| hp.block())
        }
    }
}
