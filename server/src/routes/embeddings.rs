//! POST /v1/embeddings: texts in, one vector each out, in the OpenAI API's shape, from a served
//! text embedder (a sentence-transformers checkpoint: pooled and normalised as it says).

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use base64::Engine;
use infer_core::embed::EmbedOptions;
use serde::Deserialize;
use serde_json::{json, Value};

use super::audio::{admit, Deadline};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::state::AppState;

/// The most texts one request may give (the OpenAI API's limit).
const MAX_INPUTS: usize = 2048;

#[derive(Debug, Deserialize)]
pub struct EmbeddingRequest {
    model: Option<String>,
    /// A text or a list of texts; read as JSON first, so token-id inputs get a clear 400.
    input: Value,
    encoding_format: Option<String>,
    dimensions: Option<usize>,
    /// Extension (text-embeddings-inference's name): a prompt of the checkpoint's, e.g.
    /// Qwen3-Embedding's `query`, put before every text.
    prompt_name: Option<String>,
    #[allow(dead_code)]
    user: Option<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum Encoding {
    Float,
    /// Little-endian f32 bytes, base64: what the `openai` client asks for by default.
    Base64,
}

impl EmbeddingRequest {
    fn texts(&self) -> Result<Vec<String>, ApiError> {
        let texts = match &self.input {
            Value::String(s) => vec![s.clone()],
            Value::Array(items) if items.iter().all(Value::is_string) => {
                items.iter().filter_map(Value::as_str).map(String::from).collect()
            }
            Value::Array(items) if items.iter().any(|v| v.is_number() || v.is_array()) => {
                return Err(ApiError::unsupported("input", "token-id inputs are not supported: send the texts"))
            }
            _ => return Err(ApiError::param("input", "input must be a string or a list of strings")),
        };
        if texts.is_empty() {
            return Err(ApiError::param("input", "input must not be an empty list"));
        }
        if texts.len() > MAX_INPUTS {
            return Err(ApiError::param("input", format!("at most {MAX_INPUTS} inputs, got {}", texts.len())));
        }
        if let Some(i) = texts.iter().position(String::is_empty) {
            return Err(ApiError::param("input", format!("input {i} is empty")));
        }
        Ok(texts)
    }

    fn encoding(&self) -> Result<Encoding, ApiError> {
        match self.encoding_format.as_deref() {
            None | Some("float") => Ok(Encoding::Float),
            Some("base64") => Ok(Encoding::Base64),
            Some(other) => {
                Err(ApiError::param("encoding_format", format!("encoding_format `{other}`: expected float or base64")))
            }
        }
    }
}

pub async fn embeddings(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<EmbeddingRequest>,
) -> Result<Json<Value>, ApiError> {
    let deadline = Deadline::new(state.config.request_timeout_secs);
    let (name, service) = state.embedder(req.model.as_deref())?;
    let texts = req.texts()?;
    let encoding = req.encoding()?;
    let model = service.model.clone();
    if let Some(p) = req.prompt_name.as_deref().filter(|p| !model.prompt_names().iter().any(|n| n == p)) {
        return Err(ApiError::param(
            "prompt_name",
            format!("unknown prompt_name `{p}`; this model has: {}", model.prompt_names().join(", ")),
        ));
    }
    let dimensions = match req.dimensions {
        Some(d) if d == 0 || d > model.dimension() => {
            return Err(ApiError::param(
                "dimensions",
                format!("dimensions must be in [1, {}], got {d}", model.dimension()),
            ))
        }
        d => d.unwrap_or(0),
    };
    let prompt = req.prompt_name.clone().map(EmbedOptions::with_prompt).unwrap_or_default();
    let options = EmbedOptions { dimensions, ..prompt };
    let admitted = admit(&service.admission)?;
    let permit = deadline.permit(&service.permits).await?;
    // A batch is seconds of CPU at most: it runs on the blocking pool, off the async workers.
    let embedded = tokio::task::spawn_blocking(move || {
        let _held = (admitted, permit);
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        model.embed(&refs, &options)
    });
    let out = deadline
        .within(embedded)
        .await?
        .map_err(|e| ApiError::internal(format!("embedding failed: {e}")))?
        .map_err(|e| ApiError::from_core(&e))?;
    let data: Vec<Value> = out
        .vectors()
        .enumerate()
        .map(|(index, v)| {
            let embedding = match encoding {
                Encoding::Float => json!(v),
                Encoding::Base64 => {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    base64::engine::general_purpose::STANDARD.encode(bytes).into()
                }
            };
            json!({ "object": "embedding", "index": index, "embedding": embedding })
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": name,
        "usage": { "prompt_tokens": out.prompt_tokens, "total_tokens": out.prompt_tokens },
    })))
}
