//! Options shared by the commands that load a model.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use infer_core::{ChatTemplateOrigin, Constraint, DType, GenerateConfig, LoadConfig, SamplingDefaults, TextModel};

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Checkpoint: a directory (config.json + safetensors + tokenizer.json) or a .gguf file.
    /// Default: Gemma 3 270M Q4_K_M from the model cache (tools/models/fetch.sh puts it there).
    #[arg(long, short)]
    pub model: Option<PathBuf>,
    /// Backend name or alias: candle, tch, mlx, cpu, cuda, metal (MLX on a Mac GPU), or a plugin's name.
    #[arg(long, short)]
    pub backend: Option<String>,
    /// Device within the backend, e.g. cuda:1, or cpu / gpu for mlx.
    #[arg(long)]
    pub device: Option<String>,
    /// Compute dtype of float weights: f32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Bound the KV cache to this many tokens (0: unbounded).
    #[arg(long, default_value_t = 0)]
    pub context_len: usize,
    /// Storage dtype of the KV cache: f32, f16 or bf16 (default: the compute dtype). f16 halves
    /// the cache and matches llama.cpp's default cache.
    #[arg(long)]
    pub kv_dtype: Option<String>,
}

/// Where tools/models/fetch.sh puts the real models.
pub fn models_dir() -> PathBuf {
    match std::env::var_os("INFER_MODELS_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default().join(".cache/infer/models"),
    }
}

pub const DEFAULT_MODEL_FILE: &str = "gemma-3-270m-q4_k_m.gguf";

impl ModelArgs {
    /// The checkpoint to load: `--model`, else the default model, which must have been fetched.
    pub fn model_path(&self) -> Result<PathBuf> {
        if let Some(m) = &self.model {
            return Ok(m.clone());
        }
        let default = models_dir().join(DEFAULT_MODEL_FILE);
        if !default.exists() {
            bail!(
                "no --model given and the default model (Gemma 3 270M Q4_K_M) is not at {}: fetch it with tools/models/fetch.sh",
                default.display()
            );
        }
        Ok(default)
    }

    /// Loads the model through `registry`.
    pub fn load(&self, registry: &infer_core::Registry) -> Result<Box<dyn TextModel>> {
        self.load_with_chat_template(registry, None)
    }

    /// Loads the model, with `chat_template` (a Jinja file) replacing the checkpoint's.
    pub fn load_with_chat_template(
        &self,
        registry: &infer_core::Registry,
        chat_template: Option<PathBuf>,
    ) -> Result<Box<dyn TextModel>> {
        let path = self.model_path()?;
        let cfg = LoadConfig { chat_template, ..self.load_config()? };
        let model = registry.load_model(&path, &cfg).with_context(|| format!("loading {}", path.display()))?;
        crate::allocator::keep_freed_memory_for_reuse();
        Ok(model)
    }

    pub fn load_config(&self) -> Result<LoadConfig> {
        let Some(dtype) = DType::parse_float(&self.dtype) else {
            bail!("--dtype {}: expected f32, f16 or bf16", self.dtype);
        };
        let kv_dtype = match &self.kv_dtype {
            None => None,
            Some(s) => match DType::parse_float(s) {
                Some(d) => Some(d),
                None => bail!("--kv-dtype {s}: expected f32, f16 or bf16"),
            },
        };
        Ok(LoadConfig {
            backend: self.backend.clone(),
            device: self.device.clone(),
            context_len: self.context_len,
            dtype: Some(dtype),
            kv_dtype,
            ..Default::default()
        })
    }
}

/// Sampling flags of `run` and `chat`. Unset flags take the checkpoint's defaults.
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 is greedy. Default: the checkpoint's (generation_config.json or
    /// GGUF sampling metadata), else 0.8.
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Keep the K most likely tokens (0 disables). Default: the checkpoint's, else 40.
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Nucleus sampling mass (1 disables). Default: the checkpoint's, else 0.95.
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Drop tokens below this fraction of the best one's probability (0 disables). Default: the
    /// checkpoint's, else 0.05.
    #[arg(long)]
    pub min_p: Option<f32>,
    /// Penalty on tokens already present (1 disables). Default: the checkpoint's, else 1.
    #[arg(long)]
    pub repeat_penalty: Option<f32>,
    /// Seed of the sampler (default: random).
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// The model's defaults with the given flags on top.
    pub fn config(&self, defaults: &SamplingDefaults) -> GenerateConfig {
        GenerateConfig {
            temperature: self.temperature.unwrap_or(defaults.temperature),
            top_k: self.top_k.unwrap_or(defaults.top_k),
            top_p: self.top_p.unwrap_or(defaults.top_p),
            min_p: self.min_p.unwrap_or(defaults.min_p),
            repeat_penalty: self.repeat_penalty.unwrap_or(defaults.repeat_penalty),
            seed: self.seed,
            ..Default::default()
        }
    }
}

/// What the output must match (constrained decoding); at most one.
#[derive(Args, Debug, Clone, Default)]
#[group(multiple = false)]
pub struct ConstraintArgs {
    /// Constrain the output to JSON that this JSON Schema file accepts (a file holding `{}`
    /// allows any JSON value).
    #[arg(long, value_name = "FILE")]
    pub json_schema: Option<PathBuf>,
    /// Constrain the output to this Lark grammar file (llguidance's dialect: rule `start`;
    /// `%json {...}` embeds a JSON Schema).
    #[arg(long, value_name = "FILE")]
    pub grammar: Option<PathBuf>,
    /// Constrain the output to text this regular expression matches whole.
    #[arg(long, value_name = "REGEX")]
    pub regex: Option<String>,
}

impl ConstraintArgs {
    pub fn constraint(&self) -> Result<Option<Constraint>> {
        let read = |p: &PathBuf| std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()));
        if let Some(p) = &self.json_schema {
            let schema = serde_json::from_str(&read(p)?)
                .with_context(|| format!("{} is not JSON (a JSON Schema file is)", p.display()))?;
            return Ok(Some(Constraint::JsonSchema(schema)));
        }
        if let Some(p) = &self.grammar {
            return Ok(Some(Constraint::Lark(read(p)?)));
        }
        Ok(self.regex.clone().map(Constraint::Regex))
    }
}

/// One line on stderr when `chat` will use a format the checkpoint does not carry.
pub fn note_chat_template(model: &dyn TextModel, path: &std::path::Path) {
    if let ChatTemplateOrigin::BuiltIn(name) = model.chat_template_origin() {
        eprintln!(
            "note: {} has no chat template; using the {name} format of its architecture (--chat-template FILE overrides)",
            path.display()
        );
    }
}
