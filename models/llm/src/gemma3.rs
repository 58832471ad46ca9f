//! Gemma 3 text decoder (transformers `modeling_gemma3.py`, `Gemma3ForCausalLM`).
//!
//! ```text
//! x = embed(tokens) * sqrt(hidden)
//! per layer:  x + post_attn_norm(attn(input_norm(x)))
//!             x + post_ffw_norm(mlp(pre_ffw_norm(x)))          mlp: down(gelu_tanh(gate) * up)
//! attn: q/k RMSNorm per head, RoPE (local base on sliding layers, global base on full ones),
//!       scale query_pre_attn_scalar^-1/2, sliding layers see the last `sliding_window` keys
//! ```
//!
//! Every RMSNorm multiplies by `(1 + w)`. HF checkpoints store `w`, so 1 is added at load;
//! llama.cpp's converter already stores `1 + w` in GGUF files.

use std::path::Path;

use infer_core::{Backend, Error, ModelLoadOptions, Result, RopeLayout};
use serde::Deserialize;

use infer_layers::checkpoint::GGUF_GEMMA_BLOCK_NAMES;
use infer_layers::{
    gguf_name_with, model_info, read_config, Activation, BlockConfig, BlockNames, CausalDecoder, Checkpoint,
    DecoderBlock, DecoderLayer, DecoderParts, HParams, Linear, Norm, NormKind, NormPlacement, QkNorm, Rotary,
};

#[derive(Debug, Clone, Deserialize)]
struct Gemma3Config {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: usize,
    head_dim: usize,
    max_position_embeddings: usize,
    rms_norm_eps: f64,
    query_pre_attn_scalar: f64,
    sliding_window: usize,
    layer_types: Option<Vec<String>>,
    sliding_window_pattern: Option<usize>,
    rope_theta: Option<f64>,
    rope_local_base_freq: Option<f64>,
    /// transformers 5.x: `{full_attention: {rope_theta, ...}, sliding_attention: {...}}`
    rope_parameters: Option<serde_json::Value>,
    final_logit_softcapping: Option<f64>,
    attn_logit_softcapping: Option<f64>,
}

/// What a Gemma 3 model needs beyond the shared hyperparameters.
struct GemmaParams {
    hp: HParams,
    query_pre_attn_scalar: f64,
    sliding_window: usize,
    sliding: Vec<bool>,
    global_base: f64,
    local_base: f64,
    attn_softcap: f32,
    /// Added to stored norm weights: 1 for HF, 0 for GGUF.
    norm_offset: f64,
}

fn rope_base(params: Option<&serde_json::Value>, kind: &str) -> Option<f64> {
    params?.get(kind)?.get("rope_theta")?.as_f64()
}

fn from_config(dir: &Path) -> Result<GemmaParams> {
    let c: Gemma3Config = read_config(dir)?;
    let cfg_path = dir.join("config.json");
    if c.final_logit_softcapping.is_some() {
        return Err(Error::config(&cfg_path, "final_logit_softcapping is not supported (Gemma 3 has none)"));
    }
    let pattern = c.sliding_window_pattern.unwrap_or(6);
    let sliding: Vec<bool> = match &c.layer_types {
        Some(types) => types.iter().map(|t| t == "sliding_attention").collect(),
        None if pattern == 0 => return Err(Error::config(&cfg_path, "sliding_window_pattern must be at least 1")),
        None => (0..c.num_hidden_layers).map(|i| (i + 1) % pattern != 0).collect(),
    };
    if sliding.len() != c.num_hidden_layers {
        return Err(Error::config(
            &cfg_path,
            format!("layer_types lists {} layers but num_hidden_layers is {}", sliding.len(), c.num_hidden_layers),
        ));
    }
    let params = c.rope_parameters.as_ref();
    Ok(GemmaParams {
        hp: HParams {
            vocab_size: c.vocab_size,
            hidden: c.hidden_size,
            intermediate: c.intermediate_size,
            layers: c.num_hidden_layers,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            max_positions: c.max_position_embeddings,
            rms_eps: c.rms_norm_eps,
            rope_theta: c.rope_theta.or(rope_base(params, "full_attention")).unwrap_or(1_000_000.0),
            tie_embeddings: true,
        },
        query_pre_attn_scalar: c.query_pre_attn_scalar,
        sliding_window: c.sliding_window,
        sliding,
        global_base: c.rope_theta.or(rope_base(params, "full_attention")).unwrap_or(1_000_000.0),
        local_base: c.rope_local_base_freq.or(rope_base(params, "sliding_attention")).unwrap_or(10_000.0),
        attn_softcap: c.attn_logit_softcapping.unwrap_or(0.0) as f32,
        norm_offset: 1.0,
    })
}

fn from_gguf(g: &infer_core::GgufFile) -> Result<GemmaParams> {
    let hp = HParams::from_gguf(g, "gemma3")?;
    // llama.cpp: every 6th layer is global; the local RoPE base is fixed at 10000.
    let sliding = (0..hp.layers).map(|i| (i + 1) % 6 != 0).collect();
    Ok(GemmaParams {
        query_pre_attn_scalar: hp.head_dim as f64,
        sliding_window: g.usize("gemma3.attention.sliding_window")?,
        sliding,
        global_base: hp.rope_theta,
        local_base: g.f64("gemma3.rope.freq_base_swa").unwrap_or(10_000.0),
        attn_softcap: 0.0,
        norm_offset: 0.0,
        hp,
    })
}

/// Gemma's per-layer norm names differ from the Llama family's.
fn gemma_gguf_name(hf: &str) -> String {
    gguf_name_with(hf, GGUF_GEMMA_BLOCK_NAMES)
}

/// Block `i`: sandwich norms multiplying by `(1 + w)`, per-head q/k RMSNorm, GeGLU (gate and up
/// kept as two products), a window on the sliding layers.
fn block(p: &GemmaParams, i: usize) -> BlockConfig {
    let norm = NormKind::Rms { offset: p.norm_offset };
    p.hp.block()
        .norm(norm)
        .placement(NormPlacement::Sandwich)
        .names(BlockNames::GEMMA)
        .attention(|a| {
            a.qk_norm(Some(QkNorm::per_head_rms(p.hp.rms_eps).kind(norm)))
                .scale(p.query_pre_attn_scalar.powf(-0.5) as f32)
                .window(if p.sliding[i] { p.sliding_window } else { 0 })
                .softcap(p.attn_softcap)
        })
        .mlp(|m| m.activation(Activation::GeluTanh).stack_gate_up(false))
}

pub fn load(path: &Path, backend: &Backend, opts: &ModelLoadOptions) -> Result<CausalDecoder> {
    let ckpt = Checkpoint::open(path)?;
    let p = match &ckpt {
        Checkpoint::Dir(dir) => from_config(dir)?,
        Checkpoint::Gguf(g) => from_gguf(g)?,
    };
    let hp = &p.hp;
    let w = ckpt.weights(backend, opts.dtype, gemma_gguf_name)?;
    let m = w.prefixed("model");
    let layers = DecoderBlock::load_stack(&m, hp.layers, |i| block(&p, i))?
        .into_iter()
        .map(|b| Box::new(b) as Box<dyn DecoderLayer>)
        .collect();
    let embed = m.get_shaped("embed_tokens.weight", &[hp.vocab_size, hp.hidden])?;
    let lm_head = if w.contains("lm_head.weight") {
        Linear::load(&w.prefixed("lm_head"), hp.vocab_size, hp.hidden, false)?
    } else {
        Linear::from_weight(embed.clone())
    };
    let ropes = vec![
        Rotary::new(hp.head_dim, p.global_base, RopeLayout::SplitHalf, opts.dtype)?,
        Rotary::new(hp.head_dim, p.local_base, RopeLayout::SplitHalf, opts.dtype)?,
    ];
    Ok(CausalDecoder::new(DecoderParts {
        info: model_info("gemma3", hp, &embed, opts),
        embed_scale: Some((hp.hidden as f64).sqrt()),
        embed,
        dtype: opts.dtype,
        layers,
        layer_windows: p.sliding.iter().map(|&s| if s { p.sliding_window } else { 0 }).collect(),
        norm: Norm::load(&m.prefixed("norm"), NormKind::Rms { offset: p.norm_offset }, hp.hidden, hp.rms_eps)?,
        lm_head,
        ropes,
        layer_rope: p.sliding.iter().map(|&s| usize::from(s)).collect(),
    }))
}
