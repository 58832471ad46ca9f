//! Request bodies of the OpenAI API (the fields this server reads; others are ignored) and the
//! mapping of their sampling parameters onto [`GenerateConfig`].

use std::collections::HashMap;

use infer_core::{GenerateConfig, Message};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;

/// The most stop sequences a request may give (the OpenAI API's limit).
const MAX_STOPS: usize = 4;

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u32>,
    pub tools: Option<Value>,
    pub response_format: Option<Value>,
    #[serde(flatten)]
    pub sampling: Sampling,
}

#[derive(Debug, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: Option<Content>,
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
    pub model: String,
    pub prompt: Prompt,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub echo: Option<bool>,
    pub suffix: Option<String>,
    pub best_of: Option<u32>,
    pub logprobs: Option<u32>,
    #[serde(flatten)]
    pub sampling: Sampling,
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
    /// The generation settings these parameters ask for; what cannot be honoured is refused.
    pub fn generate_config(&self, limits: RequestLimits) -> Result<GenerateConfig, ApiError> {
        let temperature = self.temperature.unwrap_or(1.0);
        if !(0.0..=2.0).contains(&temperature) {
            return Err(ApiError::param("temperature", format!("temperature must be in [0, 2], got {temperature}")));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::param("top_p", format!("top_p must be in (0, 1], got {top_p}")));
        }
        let min_p = self.min_p.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&min_p) {
            return Err(ApiError::param("min_p", format!("min_p must be in [0, 1], got {min_p}")));
        }
        let repeat_penalty = self.repetition_penalty.unwrap_or(1.0);
        if !(repeat_penalty > 0.0 && repeat_penalty.is_finite()) {
            return Err(ApiError::param(
                "repetition_penalty",
                format!("repetition_penalty must be positive, got {repeat_penalty}"),
            ));
        }
        for (name, v) in [("presence_penalty", self.presence_penalty), ("frequency_penalty", self.frequency_penalty)] {
            if v.is_some_and(|v| v != 0.0) {
                return Err(ApiError::unsupported(
                    name,
                    format!(
                        "{name} is not supported: infer penalizes repeats multiplicatively (CTRL style); \
                         send `repetition_penalty` (e.g. 1.1) instead"
                    ),
                ));
            }
        }
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::unsupported("n", "only n = 1 is supported: send one request per choice"));
        }
        if self.logit_bias.as_ref().is_some_and(|b| !b.is_empty()) {
            return Err(ApiError::unsupported("logit_bias", "logit_bias is not supported"));
        }
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
            temperature,
            top_k: self.top_k.unwrap_or(0),
            top_p,
            min_p,
            repeat_penalty,
            stop_strings: stop_strings.into_iter().filter(|s| !s.is_empty()).collect(),
            ignore_eos: self.ignore_eos.unwrap_or(false),
            seed,
            ..Default::default()
        })
    }
}

impl ChatRequest {
    /// Refuses the chat parameters this server does not implement.
    pub fn check_supported(&self) -> Result<(), ApiError> {
        if self.logprobs == Some(true) || self.top_logprobs.is_some_and(|n| n > 0) {
            return Err(ApiError::unsupported("logprobs", "logprobs are not supported"));
        }
        if self.tools.as_ref().is_some_and(|t| !t.is_null() && t.as_array().is_none_or(|a| !a.is_empty())) {
            return Err(ApiError::unsupported("tools", "tool calling is not supported"));
        }
        if let Some(f) = &self.response_format {
            if f.get("type").and_then(Value::as_str).is_some_and(|t| t != "text") {
                return Err(ApiError::unsupported(
                    "response_format",
                    "only response_format {\"type\": \"text\"} is supported",
                ));
            }
        }
        Ok(())
    }

    pub fn messages(&self) -> Result<Vec<Message>, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::param("messages", "messages must not be empty"));
        }
        self.messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let content = match &m.content {
                    None => String::new(),
                    Some(Content::Text(t)) => t.clone(),
                    Some(Content::Parts(parts)) => {
                        let mut text = String::new();
                        for p in parts {
                            match (p.kind.as_str(), &p.text) {
                                ("text", Some(t)) => text.push_str(t),
                                (kind, _) => {
                                    return Err(ApiError::unsupported(
                                        &format!("messages[{i}].content"),
                                        format!("content parts of type `{kind}` are not supported (text only)"),
                                    ))
                                }
                            }
                        }
                        text
                    }
                };
                // "developer" is the newer name of the system role.
                let role = if m.role == "developer" { "system" } else { m.role.as_str() };
                Ok(Message::new(role, content))
            })
            .collect()
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
        if self.logprobs.is_some_and(|l| l > 0) {
            return Err(ApiError::unsupported("logprobs", "logprobs are not supported"));
        }
        Ok(())
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

    #[test]
    fn maps_the_sampling_parameters() {
        let cfg =
            sampling(r#"{"temperature":0,"top_p":0.5,"max_completion_tokens":7,"max_tokens":9,"stop":"x","seed":3}"#)
                .generate_config(limits(100))
                .unwrap();
        assert_eq!((cfg.temperature, cfg.top_p, cfg.max_tokens, cfg.seed), (0.0, 0.5, 7, Some(3)));
        assert_eq!(cfg.stop_strings, vec!["x".to_string()]);
        assert_eq!(sampling("{}").generate_config(limits(100)).unwrap().max_tokens, 100);
    }

    #[test]
    fn huge_max_tokens_are_lowered_to_the_limit() {
        for json in [r#"{"max_tokens":9223372036854775807}"#, r#"{"max_completion_tokens":1001}"#] {
            assert_eq!(sampling(json).generate_config(limits(10)).unwrap().max_tokens, 1000, "{json}");
        }
        assert_eq!(sampling("{}").generate_config(limits(5000)).unwrap().max_tokens, 1000);
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        for (json, param) in [
            (r#"{"presence_penalty":0.5}"#, "presence_penalty"),
            (r#"{"frequency_penalty":-1}"#, "frequency_penalty"),
            (r#"{"temperature":3}"#, "temperature"),
            (r#"{"max_tokens":0}"#, "max_tokens"),
            (r#"{"n":2}"#, "n"),
            (r#"{"stop":["a","b","c","d","e"]}"#, "stop"),
            (r#"{"stop":"123456789"}"#, "stop"),
            (r#"{"stop":["ok","123456789"]}"#, "stop"),
        ] {
            let e = sampling(json).generate_config(limits(10)).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{json}: {e}");
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        }
        // Zero penalties are the API's defaults: accepted.
        sampling(r#"{"presence_penalty":0,"frequency_penalty":0}"#).generate_config(limits(10)).unwrap();
        sampling(r#"{"stop":"12345678"}"#).generate_config(limits(10)).unwrap();
    }
}
