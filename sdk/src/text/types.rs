//! Value types of the text API (mirroring go-inference).

use abi_stable::{std_types::RString, StableAbi};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::DType;

/// One generated token and its decoded text (the text is the increment this token adds, so
/// concatenating `text` over a stream gives the decoded output).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Token {
    pub id: u32,
    pub text: String,
}

/// A chat turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message { role: role.into(), content: content.into() }
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// Sampling and stopping options. `temperature == 0` is greedy.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct GenerateConfig {
    pub max_tokens: usize,
    pub temperature: f32,
    /// 0 disables.
    pub top_k: usize,
    /// 1.0 disables.
    pub top_p: f32,
    /// 0 disables.
    pub min_p: f32,
    /// 1.0 disables.
    pub repeat_penalty: f32,
    /// OpenAI's additive penalties over the generated tokens (the prompt is not counted): a
    /// token generated `n` times loses `presence_penalty · [n > 0] + frequency_penalty · n` from
    /// its logit. 0 disables.
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// Added to these ids' logits before sampling (OpenAI's `logit_bias`; ids past the
    /// vocabulary are ignored).
    pub logit_bias: Vec<(u32, f32)>,
    /// Extra stop token ids (the model's end-of-turn ids always stop unless `ignore_eos`).
    pub stop_tokens: Vec<u32>,
    /// Generation stops when the decoded output ends with one of these (the string is not emitted).
    pub stop_strings: Vec<String>,
    pub ignore_eos: bool,
    pub seed: Option<u64>,
    /// Report each generated token's log-probability and those of the `n` most likely ids at
    /// its step (`None`: none). Continuous batches carry them in their token events.
    pub logprobs: Option<usize>,
    /// Keep the last-position logits of each step in the stream's tokens (for tests and tools).
    pub return_logits: bool,
    /// What the output must match (constrained decoding): before each draw, every id that
    /// cannot continue a match is masked, so the output always matches once it ends.
    pub constraint: Option<Constraint>,
}

/// A language the generated text must belong to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Constraint {
    /// A JSON value this JSON Schema accepts (`{}`: any JSON value; `{"type": "object"}`: any
    /// object).
    JsonSchema(serde_json::Value),
    /// Text that this regular expression matches whole.
    Regex(String),
    /// A context-free grammar in Lark syntax (llguidance's dialect: `start` is the top rule,
    /// `%json {...}` embeds a JSON Schema, `<|name|>` matches a special token).
    Lark(String),
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig {
            max_tokens: 256,
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            stop_tokens: Vec::new(),
            stop_strings: Vec::new(),
            ignore_eos: false,
            seed: None,
            logprobs: None,
            return_logits: false,
            constraint: None,
        }
    }
}

impl GenerateConfig {
    pub fn greedy(max_tokens: usize) -> Self {
        GenerateConfig { max_tokens, ..Default::default() }
    }
}

/// How to load a model.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LoadConfig {
    /// Backend name or alias (`candle`, `cpu`, `cuda`, `metal`); `None` takes the configured default.
    pub backend: Option<String>,
    /// Device within the backend, e.g. `cpu`, `cuda:0`; `None` lets the backend choose.
    pub device: Option<String>,
    /// Bound the KV cache to this many tokens (rotating cache for all layers); 0 is unbounded.
    pub context_len: usize,
    /// Compute dtype for float weights; `None` keeps f32 (or what the backend prefers).
    #[serde(skip)]
    pub dtype: Option<DType>,
    /// Storage dtype of the KV cache (e.g. f16: half the memory, attention then reads keys and
    /// values at that precision); `None` keeps the compute dtype.
    #[serde(skip)]
    pub kv_dtype: Option<DType>,
    /// Quantize the model's large float linear weights to this block format at load (q8_0,
    /// q4_k: [`DType::parse_linear_quant`]); `None` keeps them in the compute dtype. Models
    /// that cannot quantize at load refuse it.
    #[serde(skip)]
    pub quant: Option<DType>,
    /// Concurrent generation slots (reserved for servers).
    pub parallel_slots: usize,
    /// LoRA adapter directory (not implemented yet; loading one is an error).
    pub adapter_path: Option<String>,
    /// A Jinja chat template file used instead of the checkpoint's own (or of the built-in
    /// format for its architecture, when it has none).
    pub chat_template: Option<std::path::PathBuf>,
}

/// Where a model's chat template came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatTemplateOrigin {
    /// The checkpoint's own (tokenizer_config.json, chat_template.jinja, GGUF metadata).
    Checkpoint,
    /// A file the caller named.
    File(std::path::PathBuf),
    /// The checkpoint has none: the built-in format of its architecture, by name.
    BuiltIn(&'static str),
    /// None at all: `chat` is unsupported.
    None,
}

/// Measurements of the most recent operation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GenerateMetrics {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    #[serde(with = "duration_secs")]
    pub prefill_duration: Duration,
    #[serde(with = "duration_secs")]
    pub decode_duration: Duration,
    #[serde(with = "duration_secs")]
    pub total_duration: Duration,
    #[serde(with = "duration_secs")]
    pub time_to_first_token: Duration,
    pub prefill_tokens_per_sec: f64,
    pub decode_tokens_per_sec: f64,
    pub peak_memory_bytes: u64,
    pub active_memory_bytes: u64,
    /// Time spent computing the constraint's token masks and advancing it (part of the
    /// prefill and decode durations; zero when the output was not constrained).
    #[serde(with = "duration_secs", default)]
    pub constraint_duration: Duration,
}

mod duration_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_secs_f64(f64::deserialize(d)?))
    }
}

/// Static facts about a loaded model (FFI-safe: plugins report it).
#[repr(C)]
#[derive(Debug, Clone, Default, StableAbi)]
pub struct ModelInfo {
    pub architecture: RString,
    pub vocab_size: usize,
    pub num_layers: usize,
    pub hidden_size: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub max_position_embeddings: usize,
    /// 0 when not quantized.
    pub quant_bits: u32,
    pub quant_group: u32,
    /// Compute dtype of the float weights.
    pub dtype: RString,
}

/// The result of classifying (prefilling) one prompt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClassifyResult {
    /// The token sampled from the last-position logits.
    pub token: Token,
    /// Last-position logits when asked for.
    pub logits: Option<Vec<f32>>,
}

/// The result of one prompt of a batch generation.
#[derive(Debug, Clone)]
pub struct BatchResult {
    pub tokens: Vec<Token>,
    pub error: Option<String>,
}

/// Cancels a running generation from another thread.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed)
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
