//! The response of a chat or completion request, for one choice or `n`: one JSON object, or
//! server-sent events (`data: {chunk}` ... `data: [DONE]`) whose chunks name their choice by
//! `index`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::http::header;
use axum::response::Response;
use infer_core::{FinishReason, TextModel, TokenLogprobs};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tokio_stream::{StreamExt, StreamMap};

use crate::batching::JobEvent;
use crate::error::ApiError;
use crate::logprobs::{chat_entry, chat_logprobs, CompletionLogprobs};

#[derive(Clone, Copy)]
pub(super) enum Kind {
    Chat,
    Completion,
}

/// One choice's events: the first (already received, so the request was admitted) and the rest.
pub(super) struct Choice {
    pub first: JobEvent,
    pub events: mpsc::UnboundedReceiver<JobEvent>,
}

/// What one choice has received so far.
#[derive(Default)]
struct Received {
    text: String,
    chat_logprobs: Vec<Value>,
    completion_logprobs: CompletionLogprobs,
}

/// Builds the response objects of one request.
pub(super) struct Reply {
    kind: Kind,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    /// Whether the request asked for logprobs (else they are `null`).
    logprobs: bool,
    /// Its tokenizer writes the tokens of logprobs.
    text_model: Arc<dyn TextModel>,
}

impl Reply {
    pub(super) fn new(
        kind: Kind,
        model: &str,
        include_usage: bool,
        logprobs: bool,
        text_model: Arc<dyn TextModel>,
    ) -> Self {
        let prefix = match kind {
            Kind::Chat => "chatcmpl",
            Kind::Completion => "cmpl",
        };
        Reply {
            kind,
            id: crate::ids::new_id(prefix),
            model: model.to_string(),
            created: crate::ids::unix_now(),
            include_usage,
            logprobs,
            text_model,
        }
    }

    fn usage(prompt: usize, completion: usize) -> Value {
        json!({ "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion })
    }

    /// Adds a token's logprobs to what a choice received.
    fn receive(&self, got: &mut Received, logprobs: Option<(u32, TokenLogprobs)>) {
        let Some((id, lp)) = logprobs else { return };
        let tokenizer = self.text_model.tokenizer();
        match self.kind {
            Kind::Chat => got.chat_logprobs.push(chat_entry(tokenizer, id, &lp)),
            Kind::Completion => got.completion_logprobs.push(tokenizer, id, &lp),
        }
    }

    /// The `logprobs` of what `got` received since the last call (`null` when not asked for).
    fn take_logprobs(&self, got: &mut Received) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        match self.kind {
            Kind::Chat => chat_logprobs(std::mem::take(&mut got.chat_logprobs)),
            Kind::Completion => got.completion_logprobs.take(),
        }
    }

    /// The whole response, once every choice is done; prompt tokens are counted once.
    pub(super) async fn collect(self, choices: Vec<Choice>) -> Result<Value, ApiError> {
        let (mut prompt, mut completion) = (0, 0);
        let mut objects = Vec::with_capacity(choices.len());
        for (index, Choice { first, mut events }) in choices.into_iter().enumerate() {
            let mut got = Received::default();
            let mut next = Some(first);
            loop {
                let event = match next.take() {
                    Some(e) => Some(e),
                    None => events.recv().await,
                };
                match event {
                    Some(JobEvent::Token { text, logprobs }) => {
                        got.text.push_str(&text);
                        self.receive(&mut got, logprobs);
                    }
                    Some(JobEvent::Done { reason, prompt_tokens, completion_tokens }) => {
                        prompt = prompt_tokens;
                        completion += completion_tokens;
                        let logprobs = self.take_logprobs(&mut got);
                        let reason = reason.as_str();
                        objects.push(match self.kind {
                            Kind::Chat => json!({
                                "index": index,
                                "message": { "role": "assistant", "content": got.text },
                                "finish_reason": reason,
                                "logprobs": logprobs,
                            }),
                            Kind::Completion => {
                                json!({ "index": index, "text": got.text, "finish_reason": reason, "logprobs": logprobs })
                            }
                        });
                        break;
                    }
                    Some(JobEvent::Failed(e)) => return Err(e),
                    None => return Err(ApiError::internal("the generation ended without a result")),
                }
            }
        }
        Ok(json!({
            "id": self.id,
            "object": self.object(),
            "created": self.created,
            "model": self.model,
            "choices": objects,
            "usage": Self::usage(prompt, completion),
        }))
    }

    fn object(&self) -> &'static str {
        match self.kind {
            Kind::Chat => "chat.completion",
            Kind::Completion => "text_completion",
        }
    }

    fn chunk(&self, index: usize, delta: Option<&str>, role: bool, finish: Option<FinishReason>, lp: Value) -> Value {
        let finish = finish.map(FinishReason::as_str);
        let (object, choice) = match self.kind {
            Kind::Chat => {
                let mut d = serde_json::Map::new();
                if role {
                    d.insert("role".into(), "assistant".into());
                }
                if let Some(t) = delta {
                    d.insert("content".into(), t.into());
                }
                (
                    "chat.completion.chunk",
                    json!({ "index": index, "delta": d, "finish_reason": finish, "logprobs": lp }),
                )
            }
            Kind::Completion => (
                "text_completion",
                json!({ "index": index, "text": delta.unwrap_or(""), "finish_reason": finish, "logprobs": lp }),
            ),
        };
        let mut v = json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model, "choices": [choice],
        });
        if self.include_usage {
            v["usage"] = Value::Null;
        }
        v
    }

    /// One SSE body: for chat a first chunk per choice with the role, then a chunk per token (of
    /// whichever choice it is), a last one per choice with its finish reason, once all are done
    /// the usage chunk when asked for, and `[DONE]`; a failure mid-way ends the stream with an
    /// error event instead. A client gone (the body dropped) drops the choices' receivers, which
    /// cancels their generations at the next step.
    pub(super) fn stream(self, choices: Vec<Choice>) -> Response {
        let (tx, rx) = mpsc::channel::<Result<String, Infallible>>(16);
        tokio::spawn(self.pump(choices, tx));
        Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .body(Body::from_stream(ReceiverStream::new(rx)))
            .expect("static headers")
    }

    async fn pump(self, choices: Vec<Choice>, tx: mpsc::Sender<Result<String, Infallible>>) {
        let n = choices.len();
        let mut merged = StreamMap::with_capacity(n);
        for (index, c) in choices.into_iter().enumerate() {
            merged.insert(index, tokio_stream::once(c.first).chain(UnboundedReceiverStream::new(c.events)));
        }
        let mut got: Vec<Received> = (0..n).map(|_| Received::default()).collect();
        let mut out = String::new();
        if let Kind::Chat = self.kind {
            for index in 0..n {
                sse(&mut out, &self.chunk(index, Some(""), true, None, Value::Null));
            }
        }
        let (mut done, mut completion) = (0, 0);
        loop {
            // Never an empty chunk: it could read as the end of a chunked body.
            if !out.is_empty() && tx.send(Ok(std::mem::take(&mut out))).await.is_err() {
                return;
            }
            let event = tokio::select! {
                _ = tx.closed() => return,
                e = merged.next() => e,
            };
            // Every channel closed without its end: the scheduler is gone; the body just ends.
            let Some((index, event)) = event else { return };
            match event {
                JobEvent::Token { text, logprobs: None } if text.is_empty() => {}
                JobEvent::Token { text, logprobs } => {
                    self.receive(&mut got[index], logprobs);
                    let lp = self.take_logprobs(&mut got[index]);
                    sse(&mut out, &self.chunk(index, Some(&text), false, None, lp));
                }
                JobEvent::Done { reason, prompt_tokens, completion_tokens } => {
                    sse(&mut out, &self.chunk(index, None, false, Some(reason), Value::Null));
                    (done, completion) = (done + 1, completion + completion_tokens);
                    if done < n {
                        continue;
                    }
                    if self.include_usage {
                        let mut u = self.chunk(index, None, false, None, Value::Null);
                        u["choices"] = json!([]);
                        // Every choice has the same prompt: counted once.
                        u["usage"] = Self::usage(prompt_tokens, completion);
                        sse(&mut out, &u);
                    }
                    out.push_str("data: [DONE]\n\n");
                    let _ = tx.send(Ok(out)).await;
                    return;
                }
                JobEvent::Failed(e) => {
                    sse(&mut out, &e.body());
                    let _ = tx.send(Ok(out)).await;
                    return;
                }
            }
        }
    }
}

fn sse(out: &mut String, v: &Value) {
    out.push_str("data: ");
    out.push_str(&v.to_string());
    out.push_str("\n\n");
}
