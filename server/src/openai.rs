//! Request bodies of the OpenAI API (the fields this server reads; others are ignored) and the
//! mapping of their sampling parameters onto [`GenerateConfig`].

use std::collections::HashMap;

use infer_core::{Constraint, GenerateConfig, SamplingDefaults};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::logprobs::MAX_TOP_LOGPROBS;
use crate::structured_output::answer_format;

/// The most stop sequences a request may give (the OpenAI API's limit).
const MAX_STOPS: usize = 4;

/// The most choices (`n`) one request may ask for: each takes a batch slot.
pub const MAX_CHOICES: u32 = 16;

/// The bound of `logit_bias` values (the OpenAI API's).
const MAX_BIAS: f32 = 100.0;

/// The bound of `presence_penalty` and `frequency_penalty` (the OpenAI API's).
const MAX_PENALTY: f32 = 2.0;

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    /// Optional: a server of one model serves it whatever the name ([`crate::state::AppState::resolve`]).
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u32>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    /// Variables for the chat template, e.g. `{"enable_thinking": false}` (vLLM's and
    /// llama-server's name).
    pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
    pub response_format: Option<Value>,
    #[serde(flatten)]
    pub output: OutputFormat,
    #[serde(flatten)]
    pub sampling: Sampling,
}

#[derive(Debug, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: Option<Content>,
    /// An assistant turn's calls: `{"id", "type": "function", "function": {"name", "arguments"}}`.
    pub tool_calls: Option<Value>,
    /// A tool result: the call it answers.
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
    pub reasoning_content: Option<String>,
}

/// Message content: a string, or parts of which only text is understood.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: Option<String>,
    pub prompt: Prompt,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub echo: Option<bool>,
    pub suffix: Option<String>,
    pub best_of: Option<u32>,
    pub logprobs: Option<u32>,
    #[serde(flatten)]
    pub output: OutputFormat,
    #[serde(flatten)]
    pub sampling: Sampling,
}

/// The output formats local servers take beside OpenAI's `response_format`.
#[derive(Debug, Default, Deserialize)]
pub struct OutputFormat {
    /// vLLM's: one of `json` (a schema), `regex`, `choice` (strings), `grammar` (Lark).
    pub structured_outputs: Option<Value>,
    /// llama-server's: a JSON Schema the output follows.
    pub json_schema: Option<Value>,
}

impl OutputFormat {
    /// The answer format of a request with these fields and `response_format`.
    pub fn constraint(&self, response_format: Option<&Value>) -> Result<Option<Constraint>, ApiError> {
        let schema = match &self.json_schema {
            None | Some(Value::Null) => None,
            Some(s) if s.is_object() || s.is_boolean() => Some(Constraint::JsonSchema(s.clone())),
            Some(_) => return Err(ApiError::param("json_schema", "json_schema must be a JSON Schema object")),
        };
        let format = answer_format(response_format, self.structured_outputs.as_ref())?;
        match (format, schema) {
            (Some(_), Some(_)) => Err(ApiError::param(
                "json_schema",
                "give one output format: json_schema, response_format or structured_outputs",
            )),
            (a, b) => Ok(a.or(b)),
        }
    }
}

/// `prompt`: text, token ids, or a list of either (only lists of one are served).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// Sampling and stopping parameters shared by chat and completions, with the usual extensions
/// of local servers (`top_k`, `min_p`, `repetition_penalty`, `ignore_eos`).
#[derive(Debug, Default, Deserialize)]
pub struct Sampling {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub stop: Option<Stop>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub n: Option<u32>,
    pub logit_bias: Option<HashMap<String, f32>>,
    pub top_k: Option<usize>,
    pub min_p: Option<f32>,
    /// transformers' name; llama-server's `repeat_penalty` is read too.
    #[serde(alias = "repeat_penalty")]
    pub repetition_penalty: Option<f32>,
    pub ignore_eos: Option<bool>,
    /// The end user, as the client names them; also the trigger of the test-only fault hooks
    /// (`batching::faults`).
    pub user: Option<String>,
}

/// The server's bounds on what one request may ask for.
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    /// `max_tokens` when a request gives none.
    pub default_max_tokens: usize,
    /// Larger `max_tokens` are lowered to this.
    pub max_tokens_limit: usize,
    /// Longest stop sequence, in bytes.
    pub max_stop_bytes: usize,
}

impl RequestLimits {
    pub fn of(config: &crate::config::ServerConfig) -> Self {
        RequestLimits {
            default_max_tokens: config.default_max_tokens,
            max_tokens_limit: config.max_tokens_limit,
            max_stop_bytes: config.max_stop_bytes,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Sampling {
    /// The generation settings these parameters ask for, on top of the model's own sampling
    /// `defaults` (what `infer run` samples with when given no flags): a request that names no
    /// temperature samples as the checkpoint asks, not at the API's temperature 1. `vocab` is
    /// the model's (`logit_bias` ids must be in it). What cannot be honoured is refused.
    pub fn generate_config(
        &self,
        limits: RequestLimits,
        defaults: &SamplingDefaults,
        vocab: usize,
    ) -> Result<GenerateConfig, ApiError> {
        // Only the request's own values are checked: the checkpoint's are what `infer run` uses.
        if let Some(t) = self.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(ApiError::param("temperature", format!("temperature must be in [0, 2], got {t}")));
        }
        if let Some(p) = self.top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
            return Err(ApiError::param("top_p", format!("top_p must be in (0, 1], got {p}")));
        }
        if let Some(p) = self.min_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(ApiError::param("min_p", format!("min_p must be in [0, 1], got {p}")));
        }
        if let Some(p) = self.repetition_penalty.filter(|p| !(*p > 0.0 && p.is_finite())) {
            return Err(ApiError::param("repetition_penalty", format!("repetition_penalty must be positive, got {p}")));
        }
        for (name, v) in [("presence_penalty", self.presence_penalty), ("frequency_penalty", self.frequency_penalty)] {
            if let Some(v) = v.filter(|v| !(-MAX_PENALTY..=MAX_PENALTY).contains(v)) {
                return Err(ApiError::param(name, format!("{name} must be in [-2, 2], got {v}")));
            }
        }
        let logit_bias = self.logit_bias(vocab)?;
        let (max_param, max_tokens) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(m), _) => ("max_completion_tokens", Some(m)),
            (None, m) => ("max_tokens", m),
        };
        // Lowered, not refused: clients send huge values to mean "until the end" (the context
        // bound is applied once the prompt's length is known).
        let max_tokens = match max_tokens {
            None => limits.default_max_tokens,
            Some(m) if m >= 1 => usize::try_from(m).unwrap_or(usize::MAX),
            Some(m) => return Err(ApiError::param(max_param, format!("{max_param} must be at least 1, got {m}"))),
        }
        .min(limits.max_tokens_limit);
        let stop_strings: Vec<String> = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop_strings.len() > MAX_STOPS {
            return Err(ApiError::param(
                "stop",
                format!("at most {MAX_STOPS} stop sequences, got {}", stop_strings.len()),
            ));
        }
        // Every step matches the held text against each stop string: their length is work.
        if let Some(long) = stop_strings.iter().find(|s| s.len() > limits.max_stop_bytes) {
            return Err(ApiError::param(
                "stop",
                format!("a stop sequence is {} bytes; the limit is {} bytes", long.len(), limits.max_stop_bytes),
            ));
        }
        let seed = match self.seed {
            Some(s) if s < 0 => return Err(ApiError::param("seed", "seed must not be negative")),
            s => s.map(|s| s as u64),
        };
        Ok(GenerateConfig {
            max_tokens,
            temperature: self.temperature.unwrap_or(defaults.temperature),
            top_k: self.top_k.unwrap_or(defaults.top_k),
            top_p: self.top_p.unwrap_or(defaults.top_p),
            min_p: self.min_p.unwrap_or(defaults.min_p),
            repeat_penalty: self.repetition_penalty.unwrap_or(defaults.repeat_penalty),
            presence_penalty: self.presence_penalty.unwrap_or(0.0),
            frequency_penalty: self.frequency_penalty.unwrap_or(0.0),
            logit_bias,
            stop_strings: stop_strings.into_iter().filter(|s| !s.is_empty()).collect(),
            ignore_eos: self.ignore_eos.unwrap_or(false),
            seed,
            ..Default::default()
        })
    }

    /// `logit_bias` as (id, bias) pairs: keys are token ids of the model's vocabulary (as
    /// strings, JSON keys being strings), values in [-100, 100].
    fn logit_bias(&self, vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
        let Some(bias) = &self.logit_bias else { return Ok(Vec::new()) };
        let mut out = Vec::with_capacity(bias.len());
        for (key, &b) in bias {
            let id = match key.trim().parse::<u32>() {
                Ok(id) if (id as usize) < vocab => id,
                Ok(id) => {
                    return Err(ApiError::param(
                        "logit_bias",
                        format!(
                            "logit_bias: token id {id} is not in the vocabulary (ids 0 to {})",
                            vocab.saturating_sub(1)
                        ),
                    ))
                }
                Err(_) => {
                    return Err(ApiError::param("logit_bias", format!("logit_bias: the key `{key}` is not a token id")))
                }
            };
            if !(-MAX_BIAS..=MAX_BIAS).contains(&b) {
                return Err(ApiError::param(
                    "logit_bias",
                    format!("logit_bias of {id} must be in [-100, 100], got {b}"),
                ));
            }
            out.push((id, b));
        }
        // One order whatever the map's, so a request samples the same each time.
        out.sort_unstable_by_key(|&(id, _)| id);
        Ok(out)
    }

    /// How many choices (`n`) the request asks for.
    pub fn choices(&self) -> Result<usize, ApiError> {
        match self.n.unwrap_or(1) {
            n @ 1..=MAX_CHOICES => Ok(n as usize),
            n => Err(ApiError::param("n", format!("n must be in [1, {MAX_CHOICES}], got {n}"))),
        }
    }
}

impl ChatRequest {
    /// How many alternatives per token `logprobs` should carry (`None`: no logprobs).
    pub fn logprobs(&self) -> Result<Option<usize>, ApiError> {
        let top = self.top_logprobs.unwrap_or(0);
        if top > MAX_TOP_LOGPROBS {
            return Err(ApiError::param(
                "top_logprobs",
                format!("top_logprobs must be at most {MAX_TOP_LOGPROBS}, got {top}"),
            ));
        }
        match self.logprobs {
            Some(true) => Ok(Some(top as usize)),
            _ if top > 0 => Err(ApiError::param("top_logprobs", "top_logprobs needs logprobs: true")),
            _ => Ok(None),
        }
    }

    /// The answer format the request asks for (`response_format` and the local servers'
    /// fields), before any tools are combined with it.
    pub fn answer_constraint(&self) -> Result<Option<Constraint>, ApiError> {
        self.output.constraint(self.response_format.as_ref())
    }
}

impl CompletionRequest {
    pub fn check_supported(&self) -> Result<(), ApiError> {
        if self.echo == Some(true) {
            return Err(ApiError::unsupported("echo", "echo is not supported"));
        }
        if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::unsupported("suffix", "suffix (fill in the middle) is not supported"));
        }
        if self.best_of.is_some_and(|b| b > 1) {
            return Err(ApiError::unsupported("best_of", "best_of is not supported"));
        }
        Ok(())
    }

    /// How many alternatives per token `logprobs: k` asks for (`None`: none; 0 gives the
    /// chosen tokens' own).
    pub fn logprobs(&self) -> Result<Option<usize>, ApiError> {
        match self.logprobs {
            Some(k) if k > MAX_TOP_LOGPROBS => {
                Err(ApiError::param("logprobs", format!("logprobs must be at most {MAX_TOP_LOGPROBS}, got {k}")))
            }
            k => Ok(k.map(|k| k as usize)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampling(json: &str) -> Sampling {
        serde_json::from_str(json).unwrap()
    }

    fn limits(default_max_tokens: usize) -> RequestLimits {
        RequestLimits { default_max_tokens, max_tokens_limit: 1000, max_stop_bytes: 8 }
    }

    const CHECKPOINT: SamplingDefaults = SamplingDefaults {
        temperature: 0.6,
        top_k: 20,
        top_p: 0.9,
        min_p: 0.01,
        repeat_penalty: 1.05,
        source: "generation_config.json",
    };

    impl Sampling {
        /// With the test checkpoint's defaults.
        fn generate_config_of(&self, limits: RequestLimits) -> Result<GenerateConfig, ApiError> {
            self.generate_config(limits, &CHECKPOINT, 100)
        }
    }

    #[test]
    fn unset_sampling_fields_take_the_checkpoints_defaults_and_given_ones_win() {
        let cfg = sampling("{}").generate_config_of(limits(10)).unwrap();
        assert_eq!((cfg.temperature, cfg.top_k, cfg.top_p, cfg.min_p, cfg.repeat_penalty), (0.6, 20, 0.9, 0.01, 1.05));
        let cfg = sampling(r#"{"temperature":1.2,"top_k":0,"top_p":1,"min_p":0,"repeat_penalty":1}"#)
            .generate_config_of(limits(10))
            .unwrap();
        assert_eq!((cfg.temperature, cfg.top_k, cfg.top_p, cfg.min_p, cfg.repeat_penalty), (1.2, 0, 1.0, 0.0, 1.0));
        // One field given, the others still the checkpoint's.
        let cfg = sampling(r#"{"temperature":0}"#).generate_config_of(limits(10)).unwrap();
        assert_eq!((cfg.temperature, cfg.top_k, cfg.top_p), (0.0, 20, 0.9));
        let cfg = sampling(r#"{"repetition_penalty":1.3}"#).generate_config_of(limits(10)).unwrap();
        assert_eq!(cfg.repeat_penalty, 1.3);
    }

    #[test]
    fn maps_the_sampling_parameters() {
        let cfg =
            sampling(r#"{"temperature":0,"top_p":0.5,"max_completion_tokens":7,"max_tokens":9,"stop":"x","seed":3}"#)
                .generate_config_of(limits(100))
                .unwrap();
        assert_eq!((cfg.temperature, cfg.top_p, cfg.max_tokens, cfg.seed), (0.0, 0.5, 7, Some(3)));
        assert_eq!(cfg.stop_strings, vec!["x".to_string()]);
        assert_eq!(sampling("{}").generate_config_of(limits(100)).unwrap().max_tokens, 100);
    }

    #[test]
    fn huge_max_tokens_are_lowered_to_the_limit() {
        for json in [r#"{"max_tokens":9223372036854775807}"#, r#"{"max_completion_tokens":1001}"#] {
            assert_eq!(sampling(json).generate_config_of(limits(10)).unwrap().max_tokens, 1000, "{json}");
        }
        assert_eq!(sampling("{}").generate_config_of(limits(5000)).unwrap().max_tokens, 1000);
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        for (json, param) in [
            (r#"{"presence_penalty":2.5}"#, "presence_penalty"),
            (r#"{"frequency_penalty":-3}"#, "frequency_penalty"),
            (r#"{"logit_bias":{"100":1}}"#, "logit_bias"),
            (r#"{"logit_bias":{"a":1}}"#, "logit_bias"),
            (r#"{"logit_bias":{"-1":1}}"#, "logit_bias"),
            (r#"{"logit_bias":{"5":101}}"#, "logit_bias"),
            (r#"{"temperature":3}"#, "temperature"),
            (r#"{"max_tokens":0}"#, "max_tokens"),
            (r#"{"stop":["a","b","c","d","e"]}"#, "stop"),
            (r#"{"stop":"123456789"}"#, "stop"),
            (r#"{"stop":["ok","123456789"]}"#, "stop"),
        ] {
            let e = sampling(json).generate_config_of(limits(10)).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{json}: {e}");
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        }
        // Zero penalties are the API's defaults: accepted.
        sampling(r#"{"presence_penalty":0,"frequency_penalty":0}"#).generate_config_of(limits(10)).unwrap();
        sampling(r#"{"stop":"12345678"}"#).generate_config_of(limits(10)).unwrap();
        for n in ["0", "17"] {
            assert_eq!(sampling(&format!(r#"{{"n":{n}}}"#)).choices().unwrap_err().param.as_deref(), Some("n"));
        }
    }

    #[test]
    fn maps_penalties_logit_bias_and_choices() {
        let cfg = sampling(r#"{"presence_penalty":0.5,"frequency_penalty":-1,"logit_bias":{"7":-100," 3":2.5}}"#)
            .generate_config_of(limits(10))
            .unwrap();
        assert_eq!((cfg.presence_penalty, cfg.frequency_penalty), (0.5, -1.0));
        assert_eq!(cfg.logit_bias, vec![(3, 2.5), (7, -100.0)]);
        let cfg = sampling("{}").generate_config_of(limits(10)).unwrap();
        assert_eq!((cfg.presence_penalty, cfg.frequency_penalty, cfg.logit_bias.len()), (0.0, 0.0, 0));
        assert_eq!(sampling("{}").choices().unwrap(), 1);
        assert_eq!(sampling(r#"{"n":16}"#).choices().unwrap(), 16);
    }

    #[test]
    fn logprobs_are_asked_for_as_each_endpoint_spells_them() {
        let chat = |json: &str| {
            let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
            v["messages"] = serde_json::json!([{"role": "user", "content": "hi"}]);
            serde_json::from_value::<ChatRequest>(v).unwrap().logprobs()
        };
        assert_eq!(chat("{}").unwrap(), None);
        assert_eq!(chat(r#"{"logprobs":true}"#).unwrap(), Some(0));
        assert_eq!(chat(r#"{"logprobs":true,"top_logprobs":20}"#).unwrap(), Some(20));
        assert_eq!(chat(r#"{"logprobs":false,"top_logprobs":0}"#).unwrap(), None);
        assert_eq!(chat(r#"{"logprobs":true,"top_logprobs":21}"#).unwrap_err().param.as_deref(), Some("top_logprobs"));
        assert_eq!(chat(r#"{"top_logprobs":2}"#).unwrap_err().param.as_deref(), Some("top_logprobs"));
        let completion = |json: &str| {
            let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
            v["prompt"] = "hi".into();
            serde_json::from_value::<CompletionRequest>(v).unwrap().logprobs()
        };
        assert_eq!(completion("{}").unwrap(), None);
        assert_eq!(completion(r#"{"logprobs":0}"#).unwrap(), Some(0));
        assert_eq!(completion(r#"{"logprobs":5}"#).unwrap(), Some(5));
        assert_eq!(completion(r#"{"logprobs":21}"#).unwrap_err().param.as_deref(), Some("logprobs"));
    }
}
