//! POST /tokenize and /detokenize, in llama-server's shapes: a text model's tokenizer over HTTP
//! (clients count prompt tokens or build token-id prompts with them).

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::text::prepare;
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub struct TokenizeRequest {
    /// Which text model's tokenizer (optional with one model served).
    model: Option<String>,
    content: String,
    /// Prepend the BOS id, when the model's prompts start with one.
    #[serde(default)]
    add_special: bool,
    /// Each id with its text: `[{"id", "piece"}]` instead of `[id]`.
    #[serde(default)]
    with_pieces: bool,
}

#[derive(Debug, Deserialize)]
pub struct DetokenizeRequest {
    model: Option<String>,
    /// Read as JSON first, so a wrong element is named in a clear 400.
    tokens: Value,
}

pub async fn tokenize(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<TokenizeRequest>,
) -> Result<Json<Value>, ApiError> {
    let (_, text) = state.text(req.model.as_deref(), "/tokenize")?;
    let TokenizeRequest { content, add_special, with_pieces, .. } = req;
    let tokens = prepare(text, move |model| {
        let tokenizer = model.tokenizer();
        let ids =
            tokenizer.encode(&content, add_special && tokenizer.adds_bos()).map_err(|e| ApiError::from_core(&e))?;
        if !with_pieces {
            return Ok(json!(ids));
        }
        // A piece is the token's text alone; a token that is part of a character reads as U+FFFD.
        let pieces = ids
            .iter()
            .map(|&id| {
                let piece = tokenizer.decode(&[id], false).map_err(|e| ApiError::from_core(&e))?;
                Ok(json!({ "id": id, "piece": piece }))
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        Ok(Value::Array(pieces))
    })
    .await?;
    Ok(Json(json!({ "tokens": tokens })))
}

pub async fn detokenize(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<DetokenizeRequest>,
) -> Result<Json<Value>, ApiError> {
    let (_, text) = state.text(req.model.as_deref(), "/detokenize")?;
    let vocab = text.model.tokenizer().vocab_size();
    let ids = token_ids(&req.tokens, vocab)?;
    let content =
        prepare(text, move |model| model.tokenizer().decode(&ids, false).map_err(|e| ApiError::from_core(&e))).await?;
    Ok(Json(json!({ "content": content })))
}

/// `tokens` as ids of a vocabulary of `vocab`, or a 400 naming the first bad element.
pub fn token_ids(tokens: &Value, vocab: usize) -> Result<Vec<u32>, ApiError> {
    let list = tokens.as_array().ok_or_else(|| ApiError::param("tokens", "tokens must be a list of token ids"))?;
    list.iter()
        .enumerate()
        .map(|(i, t)| match t.as_u64() {
            Some(id) if (id as usize) < vocab => Ok(id as u32),
            Some(id) => Err(ApiError::param(
                "tokens",
                format!("tokens[{i}] = {id} is not in the vocabulary (ids 0 to {})", vocab.saturating_sub(1)),
            )),
            None => Err(ApiError::param("tokens", format!("tokens[{i}] = {t} is not a token id (an integer >= 0)"))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::token_ids;
    use serde_json::json;

    #[test]
    fn token_ids_are_integers_inside_the_vocabulary() {
        assert_eq!(token_ids(&json!([0, 5, 9]), 10).unwrap(), vec![0, 5, 9]);
        assert_eq!(token_ids(&json!([]), 10).unwrap(), Vec::<u32>::new());
        for (bad, says) in [
            (json!("1 2"), "a list of token ids"),
            (json!([1, 10]), "tokens[1] = 10 is not in the vocabulary (ids 0 to 9)"),
            (json!([1, -1]), "tokens[1] = -1 is not a token id"),
            (json!([1.5]), "tokens[0] = 1.5 is not a token id"),
            (json!(["a"]), "tokens[0] = \"a\" is not a token id"),
        ] {
            let e = token_ids(&bad, 10).unwrap_err();
            assert_eq!((e.status.as_u16(), e.param.as_deref()), (400, Some("tokens")), "{bad}");
            assert!(e.to_string().contains(says), "{bad}: {e}");
        }
    }
}
