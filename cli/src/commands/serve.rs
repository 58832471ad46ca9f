//! `infer serve`: the OpenAI-compatible server (infer-server) over this registry.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use infer_core::Registry;
use infer_server::{ModelSpec, ServerConfig};

use super::shared::models_dir;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Serve this checkpoint (a .gguf file or a model directory), named after its file or folder.
    #[arg(long, short, conflicts_with = "config")]
    pub model: Option<PathBuf>,
    /// Serve the models of this server.toml (names, paths, backends, dtypes, context lengths);
    /// see docs/serve.md. The plugin configuration is `infer --config FILE serve` / INFER_CONFIG.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to listen on (default 127.0.0.1, or the config file's).
    #[arg(long)]
    pub host: Option<String>,
    /// Port to listen on (default 8080, or the config file's; 0 picks a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// Require `Authorization: Bearer KEY` on every /v1 request.
    #[arg(long, env = "INFER_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Let browser pages from this origin call the API (CORS; repeat for several, `*` for any).
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// Serve requests naming this Host besides loopback ones when no API key is set (repeat
    /// for several).
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// Sequences a text model decodes together (continuous batching slots).
    #[arg(long)]
    pub parallel: Option<usize>,
    /// Requests that may wait for a slot before the server answers 429.
    #[arg(long)]
    pub queue: Option<usize>,
    /// The name --model is served under: what /v1/models lists (default: its file or folder
    /// name). A server of one model answers requests naming any model, this one included.
    #[arg(long, requires = "model")]
    pub alias: Option<String>,
    /// Backend for --model (candle, cpu, a plugin's name).
    #[arg(long, short, requires = "model")]
    pub backend: Option<String>,
    /// Bound the KV cache of --model to this many tokens (0: unbounded).
    #[arg(long, requires = "model")]
    pub context_len: Option<usize>,
    /// Quantize --model's linear weights at load (q8_0, q4_k; speech models, as `speak` and
    /// `transcribe` take it).
    #[arg(long, requires = "model")]
    pub quant: Option<String>,
}

pub fn run(registry: &Registry, args: ServeArgs) -> Result<()> {
    let mut config = match (&args.config, &args.model) {
        (Some(path), _) => ServerConfig::from_file(path)?,
        (None, Some(model)) => {
            let mut spec = ModelSpec::from_path(model.clone());
            spec.name = args.alias.clone();
            spec.backend = args.backend.clone();
            spec.context_len = args.context_len.unwrap_or(0);
            spec.quant = args.quant.clone();
            ServerConfig { models: vec![spec], ..Default::default() }
        }
        (None, None) => {
            let default = models_dir().join(super::shared::DEFAULT_MODEL_FILE);
            if !default.exists() {
                bail!(
                    "give --model PATH or --config server.toml (the default model {} is not fetched)",
                    default.display()
                );
            }
            ServerConfig { models: vec![ModelSpec::from_path(default)], ..Default::default() }
        }
    };
    if let Some(h) = args.host {
        config.host = h;
    }
    if let Some(p) = args.port {
        config.port = p;
    }
    if args.api_key.is_some() {
        config.api_key = args.api_key;
    }
    config.cors_origins.extend(args.cors_origins);
    config.allowed_hosts.extend(args.allowed_hosts);
    if let Some(n) = args.parallel {
        config.parallel = n;
    }
    if let Some(q) = args.queue {
        config.queue = q;
    }
    infer_server::serve_with(registry, config, crate::allocator::keep_freed_memory_for_reuse)
}
