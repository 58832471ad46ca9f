//! What the server serves and how: the command line's `--model`, or a `server.toml` with several
//! named models.
//!
//! ```toml
//! host = "127.0.0.1"
//! port = 8080
//! parallel = 4          # batch slots per text model
//! queue = 64            # requests waiting for a slot before 429
//!
//! [[models]]
//! name = "gemma"
//! path = "~/.cache/infer/models/gemma-3-270m-q4_k_m.gguf"
//! backend = "candle"    # optional, as `infer run --backend`
//! dtype = "f32"         # optional
//! quant = "q4_k"        # optional, speech models: linear weights quantized at load
//! context_len = 0       # optional
//! parallel = 8          # optional, overrides the server's
//! ```

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use infer_core::{DType, LoadConfig};
use serde::Deserialize;

/// Largest JSON body a request may send (speech inputs, long chats).
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;
/// Largest audio upload.
pub const DEFAULT_MAX_UPLOAD_BYTES: usize = 25 << 20;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    /// When set, every /v1 request needs `Authorization: Bearer <api_key>`.
    pub api_key: Option<String>,
    /// Sequences a text model decodes together (continuous batching slots).
    pub parallel: usize,
    /// Requests that may wait for a slot, per model; past it the server answers 429.
    pub queue: usize,
    /// `max_tokens` when a request gives none.
    pub default_max_tokens: usize,
    pub max_body_bytes: usize,
    pub max_upload_bytes: usize,
    /// Longest audio an upload may decode to, in seconds: decoding stops past it (413), so a
    /// small compressed file of silence cannot become gigabytes of samples.
    pub max_audio_seconds: f64,
    /// Largest `max_tokens` a request may ask for; larger values are lowered to it. Every
    /// request is also bounded by its model's context.
    pub max_tokens_limit: usize,
    /// Wall-clock limit of one request in seconds, from arrival to its last byte (0: none).
    pub request_timeout_secs: u64,
    /// Memory the KV caches of all text-model slots may take together, in MiB (0: half of the
    /// memory available at start).
    pub kv_budget_mib: u64,
    /// Seconds a client may take to send a request's headers (slow clients are cut off).
    pub header_timeout_secs: u64,
    /// Seconds a client may take to send a request's body.
    pub body_timeout_secs: u64,
    /// Seconds a kept-alive connection may wait for its next request.
    pub idle_timeout_secs: u64,
    /// Seconds a live transcription socket may go without a message before it is closed.
    pub ws_idle_timeout_secs: u64,
    /// Largest WebSocket message, in bytes.
    pub ws_max_message_bytes: usize,
    /// Require the API key for `/metrics` too (it is open by default, for scrapers).
    pub metrics_require_key: bool,
    /// Origins a browser page may call the API from (CORS); empty: no CORS headers. `"*"`
    /// allows any origin.
    pub cors_origins: Vec<String>,
    /// `Host` names accepted besides loopback ones when no API key is set (a guard against DNS
    /// rebinding); with a key every host is accepted.
    pub allowed_hosts: Vec<String>,
    /// Chat-template renders and tokenizations that run at once, off the async workers (0: the
    /// number of cores).
    pub prepare_tasks: usize,
    /// Longest stop sequence, in bytes.
    pub max_stop_bytes: usize,
    pub models: Vec<ModelSpec>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "127.0.0.1".into(),
            port: 8080,
            api_key: None,
            parallel: 4,
            queue: 64,
            default_max_tokens: 1024,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_upload_bytes: DEFAULT_MAX_UPLOAD_BYTES,
            max_audio_seconds: 900.0,
            max_tokens_limit: 32768,
            request_timeout_secs: 600,
            kv_budget_mib: 0,
            header_timeout_secs: 10,
            body_timeout_secs: 60,
            idle_timeout_secs: 60,
            ws_idle_timeout_secs: 30,
            ws_max_message_bytes: 1 << 20,
            metrics_require_key: false,
            cors_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            prepare_tasks: 0,
            max_stop_bytes: 1024,
            models: Vec::new(),
        }
    }
}

/// One model to serve.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// The name clients use in `model`; default: the file or folder name.
    pub name: Option<String>,
    pub path: PathBuf,
    pub backend: Option<String>,
    pub device: Option<String>,
    /// Compute dtype of float weights (f32, f16, bf16).
    pub dtype: Option<String>,
    /// KV cache dtype.
    pub kv_dtype: Option<String>,
    /// Linear weights quantized at load (q8_0, q4_k): speech models (docs/quantization.md).
    pub quant: Option<String>,
    #[serde(default)]
    pub context_len: usize,
    /// Batch slots for this model (default: the server's `parallel`).
    pub parallel: Option<usize>,
}

impl ServerConfig {
    /// Reads a `server.toml`; relative model paths are taken from the file's folder, `~/` from
    /// the home directory.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut cfg: ServerConfig = toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for m in &mut cfg.models {
            m.path = resolve_path(base, &m.path);
        }
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        if self.models.is_empty() {
            bail!("no model to serve: give --model PATH or a --config server.toml with [[models]]");
        }
        if self.parallel == 0 || self.models.iter().any(|m| m.parallel == Some(0)) {
            bail!("parallel must be at least 1");
        }
        if !(self.max_audio_seconds.is_finite() && self.max_audio_seconds > 0.0) {
            bail!("max_audio_seconds must be a positive number of seconds, got {}", self.max_audio_seconds);
        }
        for (name, v) in [
            ("max_tokens_limit", self.max_tokens_limit),
            ("header_timeout_secs", self.header_timeout_secs as usize),
            ("body_timeout_secs", self.body_timeout_secs as usize),
            ("idle_timeout_secs", self.idle_timeout_secs as usize),
            ("ws_idle_timeout_secs", self.ws_idle_timeout_secs as usize),
            ("ws_max_message_bytes", self.ws_max_message_bytes),
            ("max_stop_bytes", self.max_stop_bytes),
        ] {
            if v == 0 {
                bail!("{name} must be at least 1");
            }
        }
        let mut names: Vec<String> = self.models.iter().map(ModelSpec::served_name).collect();
        names.sort();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            bail!("two models are named `{}`: give them distinct `name`s", w[0]);
        }
        Ok(())
    }
}

impl ModelSpec {
    pub fn from_path(path: PathBuf) -> Self {
        ModelSpec {
            name: None,
            path,
            backend: None,
            device: None,
            dtype: None,
            kv_dtype: None,
            quant: None,
            context_len: 0,
            parallel: None,
        }
    }

    /// The name clients use: `name`, else the file or folder name (without `.gguf`).
    pub fn served_name(&self) -> String {
        if let Some(n) = &self.name {
            return n.clone();
        }
        let file = self.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        file.strip_suffix(".gguf").map(str::to_string).unwrap_or(file)
    }

    pub fn load_config(&self) -> Result<LoadConfig> {
        let float = |what: &str, v: &Option<String>| -> Result<Option<DType>> {
            match v {
                None => Ok(None),
                Some(s) => match DType::parse_float(s) {
                    Some(d) => Ok(Some(d)),
                    None => bail!("model {}: {what} `{s}`: expected f32, f16 or bf16", self.served_name()),
                },
            }
        };
        let quant = match &self.quant {
            None => None,
            Some(q) => {
                Some(DType::parse_linear_quant(q).with_context(|| format!("model {}: quant", self.served_name()))?)
            }
        };
        Ok(LoadConfig {
            backend: self.backend.clone(),
            device: self.device.clone(),
            context_len: self.context_len,
            dtype: Some(float("dtype", &self.dtype)?.unwrap_or(DType::F32)),
            kv_dtype: float("kv_dtype", &self.kv_dtype)?,
            quant,
            parallel_slots: self.parallel.unwrap_or(0),
            ..Default::default()
        })
    }
}

fn resolve_path(base: &Path, p: &Path) -> PathBuf {
    if let Ok(rest) = p.strip_prefix("~") {
        if let Some(home) = std::env::var_os("HOME") {
            return PathBuf::from(home).join(rest);
        }
    }
    if p.is_relative() {
        base.join(p)
    } else {
        p.to_path_buf()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.toml");
        std::fs::write(
            &path,
            "port = 9000\nparallel = 2\n[[models]]\nname = \"a\"\npath = \"m.gguf\"\n[[models]]\npath = \"/x/tts\"\n",
        )
        .unwrap();
        let cfg = ServerConfig::from_file(&path).unwrap();
        assert_eq!(cfg.port, 9000);
        assert_eq!(cfg.host, "127.0.0.1");
        assert_eq!(cfg.models[0].path, dir.path().join("m.gguf"));
        assert_eq!(cfg.models[1].served_name(), "tts");
        cfg.validate().unwrap();
    }

    #[test]
    fn quant_reaches_the_load_config_and_bad_names_are_refused() {
        let mut spec = ModelSpec::from_path("/m/asr".into());
        assert_eq!(spec.load_config().unwrap().quant, None);
        spec.quant = Some("Q4_K".into());
        assert_eq!(spec.load_config().unwrap().quant, Some(DType::Q4K));
        spec.quant = Some("q3".into());
        let e = format!("{:#}", spec.load_config().unwrap_err());
        assert!(e.contains("model asr: quant") && e.contains("unknown quantization `q3`"), "{e}");
    }

    #[test]
    fn rejects_unknown_keys_and_duplicate_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.toml");
        std::fs::write(&path, "prot = 1\n").unwrap();
        let e = format!("{:#}", ServerConfig::from_file(&path).unwrap_err());
        assert!(e.contains("prot"), "{e}");
        let cfg = ServerConfig {
            models: vec![ModelSpec::from_path("a/m.gguf".into()), ModelSpec::from_path("b/m.gguf".into())],
            ..Default::default()
        };
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("two models are named `m`"), "{e}");
    }
}
