//! Qwen3-Embedding: a Qwen3 decoder saved as a sentence-transformers folder (transformers'
//! `Qwen3Model`, no head), last-token pooled and L2-normalised as its modules say.

use std::path::Path;

use infer_core::{Backend, Error, ModelLoadOptions, Result};

use crate::embedding::{DecoderEmbedder, SentenceConfig};
use crate::qwen3;
use infer_core::text::HfTokenizer;
use infer_layers::read_config;

pub fn load(path: &Path, backend: &Backend, opts: &ModelLoadOptions) -> Result<DecoderEmbedder> {
    opts.refuse_quant("qwen3 embedding")?;
    if !path.is_dir() {
        return Err(Error::config(path, "an embedding checkpoint is a sentence-transformers folder"));
    }
    let config = SentenceConfig::read(path)?;
    let hp = read_config::<qwen3::QwenConfig>(path)?.hparams();
    let tokenizer = HfTokenizer::from_dir(path)?;
    let decoder = qwen3::load(path, backend, opts)?;
    let max_tokens = config.max_seq_length.unwrap_or(hp.max_positions).min(hp.max_positions);
    Ok(DecoderEmbedder {
        architecture: "qwen3".into(),
        decoder,
        tokenizer,
        backend: backend.clone(),
        config,
        hidden: hp.hidden,
        max_tokens,
    })
}
