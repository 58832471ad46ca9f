//! An out-of-tree model plugin, the smallest complete one: a bigram language model.
//!
//! Checkpoint: a directory with `config.json` (`{"model_type": "bigram", "vocab_size": V}`),
//! `model.safetensors` holding `transitions` (V, V) — row i is the next-token logits after
//! token i — and a `tokenizer.json`. The host's generation loop does tokenizing, sampling and
//! streaming; this plugin only turns tokens into logits, through the backend op set, so it runs
//! on every backend.

use std::path::Path;

use abi_stable::std_types::{ROption, RResult};
use infer_sdk::{
    backend::ffi_result, Backend, CausalLm, Error, FfiError, KvCache, ModelInfo, ModelLoadOptions, Result, Tensor,
    Weights,
};

#[derive(serde::Deserialize)]
struct Config {
    vocab_size: usize,
}

pub struct Bigram {
    transitions: Tensor,
    vocab: usize,
}

fn load(dir: &Path, backend: &Backend, opts: &ModelLoadOptions) -> Result<Bigram> {
    let cfg_path = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| Error::io(&cfg_path, e))?;
    let cfg: Config = serde_json::from_str(&text).map_err(|e| Error::config(&cfg_path, e.to_string()))?;
    let weights = Weights::from_dir(dir, backend, opts.dtype)?;
    let transitions = weights.get_shaped("transitions", &[cfg.vocab_size, cfg.vocab_size])?;
    Ok(Bigram { transitions, vocab: cfg.vocab_size })
}

impl CausalLm for Bigram {
    fn info(&self) -> ModelInfo {
        ModelInfo {
            architecture: "bigram".into(),
            vocab_size: self.vocab,
            hidden_size: self.vocab,
            dtype: self.transitions.dtype().name().into(),
            ..Default::default()
        }
    }

    fn new_cache(&self, _context_len: usize) -> RResult<KvCache, FfiError> {
        // A bigram looks at one token: there is nothing to cache.
        RResult::ROk(KvCache::new([]))
    }

    fn forward(
        &self,
        tokens: &Tensor,
        _cache: &mut KvCache,
        _mask: ROption<&Tensor>,
        last_only: bool,
    ) -> RResult<Tensor, FfiError> {
        ffi_result("bigram forward", || {
            let tokens = if last_only { tokens.narrow(1, tokens.dim(1) - 1, 1)? } else { tokens.clone() };
            tokens.embedding(&self.transitions)?.to_dtype(infer_sdk::DType::F32)
        })
    }
}

infer_sdk::register_model! {
    name: "bigram",
    description: "example out-of-tree plugin: bigram language model",
    architectures: [infer_sdk::plugin::Architecture::named("bigram")],
    kinds: [infer_sdk::plugin::TextGeneration => load],
}

infer_sdk::export_plugin_library!();
