//! Qwen2 / Qwen2.5 (transformers `modeling_qwen2.py`): the Llama-like decoder with biases on the
//! q/k/v projections (not on o) and no q/k norm. Split-half RoPE in both HF and GGUF layouts.

use std::path::Path;

use infer_core::{Backend, ModelLoadOptions, Result, RopeLayout};

use crate::qwen3::qwen_hparams;
use infer_layers::llama_like::build;
use infer_layers::{gguf_name, CausalDecoder, Checkpoint, Rotary};

pub fn load(path: &Path, backend: &Backend, opts: &ModelLoadOptions) -> Result<CausalDecoder> {
    let ckpt = Checkpoint::open(path)?;
    let hp = qwen_hparams(&ckpt, "qwen2")?;
    let w = ckpt.weights(backend, opts.dtype, gguf_name)?;
    let rotary = Rotary::new(hp.head_dim, hp.rope_theta, RopeLayout::SplitHalf, opts.dtype)?;
    build("qwen2", &hp, rotary, &w, opts, |_| hp.block().attention(|a| a.qkv_bias(true)))
}
