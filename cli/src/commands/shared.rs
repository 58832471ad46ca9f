//! Options shared by the commands that load a model.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use infer_core::{DType, LoadConfig};

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Checkpoint directory (config.json + safetensors + tokenizer.json).
    #[arg(long, short)]
    pub model: PathBuf,
    /// Backend name or alias: candle, cpu, cuda, metal, or a plugin's name.
    #[arg(long, short)]
    pub backend: Option<String>,
    /// Device within the backend, e.g. cuda:1.
    #[arg(long)]
    pub device: Option<String>,
    /// Compute dtype of float weights: f32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Bound the KV cache to this many tokens (0: unbounded).
    #[arg(long, default_value_t = 0)]
    pub context_len: usize,
}

impl ModelArgs {
    pub fn load_config(&self) -> Result<LoadConfig> {
        let Some(dtype) = DType::parse_float(&self.dtype) else {
            bail!("--dtype {}: expected f32, f16 or bf16", self.dtype);
        };
        Ok(LoadConfig {
            backend: self.backend.clone(),
            device: self.device.clone(),
            context_len: self.context_len,
            dtype: Some(dtype),
            ..Default::default()
        })
    }
}
