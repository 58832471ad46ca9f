//! `logprobs` as the OpenAI API shapes them, from the scheduler's per-token log-probabilities:
//! chat's `content` entries (`token`, `logprob`, `bytes`, `top_logprobs`) and the parallel lists
//! of completions (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`).
//!
//! The values are the log-softmax of the logits each token was drawn from, after the penalties
//! and logit bias and before temperature and truncation ([`infer_core::TokenLogprobs`]).

use infer_core::{TokenLogprobs, Tokenizer};
use serde_json::{json, Map, Value};

/// What the API writes for an impossible token (JSON has no -infinity).
const IMPOSSIBLE: f64 = -9999.0;

/// The most alternatives a request may ask for per token (the OpenAI API's limit).
pub const MAX_TOP_LOGPROBS: u32 = 20;

fn value(lp: f32) -> f64 {
    if lp.is_finite() {
        lp as f64
    } else {
        IMPOSSIBLE
    }
}

/// A token's text alone; one that is part of a character reads as U+FFFD.
fn piece(tokenizer: &dyn Tokenizer, id: u32) -> String {
    tokenizer.decode(&[id], false).unwrap_or_default()
}

/// One entry of chat's `logprobs.content`.
pub fn chat_entry(tokenizer: &dyn Tokenizer, id: u32, lp: &TokenLogprobs) -> Value {
    let entry = |id: u32, logprob: f32| {
        let token = piece(tokenizer, id);
        json!({ "token": token, "logprob": value(logprob), "bytes": token.as_bytes() })
    };
    let mut e = entry(id, lp.logprob);
    e["top_logprobs"] = lp.top.iter().map(|&(i, l)| entry(i, l)).collect();
    e
}

/// Chat's `logprobs` object of these entries.
pub fn chat_logprobs(entries: Vec<Value>) -> Value {
    json!({ "content": entries, "refusal": null })
}

/// The lists of a completion's `logprobs`, token by token; `text_offset` counts the characters
/// of the completion text before each token.
#[derive(Debug, Default)]
pub struct CompletionLogprobs {
    tokens: Vec<String>,
    token_logprobs: Vec<f64>,
    top_logprobs: Vec<Value>,
    text_offset: Vec<usize>,
    offset: usize,
}

impl CompletionLogprobs {
    /// Whether no token is waiting to be taken.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn push(&mut self, tokenizer: &dyn Tokenizer, id: u32, lp: &TokenLogprobs) {
        let token = piece(tokenizer, id);
        self.text_offset.push(self.offset);
        self.offset += token.chars().count();
        self.token_logprobs.push(value(lp.logprob));
        // Ids with the same text share a key: the likelier one's value stays.
        let mut top = Map::new();
        for &(i, l) in &lp.top {
            top.entry(piece(tokenizer, i)).or_insert(value(l).into());
        }
        self.top_logprobs.push(Value::Object(top));
        self.tokens.push(token);
    }

    /// The lists so far, emptied (a stream sends each chunk's tokens; offsets go on counting).
    pub fn take(&mut self) -> Value {
        json!({
            "tokens": std::mem::take(&mut self.tokens),
            "token_logprobs": std::mem::take(&mut self.token_logprobs),
            "top_logprobs": std::mem::take(&mut self.top_logprobs),
            "text_offset": std::mem::take(&mut self.text_offset),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::value;

    #[test]
    fn impossible_tokens_get_a_finite_number() {
        assert_eq!(value(f32::NEG_INFINITY), -9999.0);
        assert_eq!(value(-0.5), -0.5);
    }
}
