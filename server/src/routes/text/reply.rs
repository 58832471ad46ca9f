//! The response of a chat or completion request, for one choice or `n`: one JSON object, or
//! server-sent events (`data: {chunk}` ... `data: [DONE]`) whose chunks name their choice by
//! `index`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::http::header;
use axum::response::Response;
use infer_core::{FinishReason, TextModel, TokenLogprobs};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tokio_stream::{StreamExt, StreamMap};

use crate::assistant_output::{AssistantOutput, Piece};
use crate::batching::JobEvent;
use crate::chat_tools::ReplyFormat;
use crate::error::ApiError;
use crate::logprobs::{chat_entry, chat_logprobs, CompletionLogprobs};

pub(super) enum Kind {
    /// A chat reply, read as reasoning, content and tool calls.
    Chat(ReplyFormat),
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
    /// A completion's text, or a chat reply's content.
    text: String,
    /// A chat reply: its parser, reasoning and tool calls.
    parser: Option<AssistantOutput>,
    reasoning: String,
    tool_calls: Vec<Value>,
    chat_logprobs: Vec<Value>,
    completion_logprobs: CompletionLogprobs,
}

impl Received {
    /// The finish reason as the API writes it: a reply that called tools ends with "tool_calls".
    fn finish_reason(&self, reason: FinishReason) -> &'static str {
        match reason {
            FinishReason::Stop if !self.tool_calls.is_empty() => "tool_calls",
            other => other.as_str(),
        }
    }

    /// The chat `message`: content `null` when the reply is only tool calls.
    fn message(&self) -> Value {
        let content: Value = if !self.tool_calls.is_empty() && self.text.trim().is_empty() {
            Value::Null
        } else {
            self.text.clone().into()
        };
        let mut m = json!({ "role": "assistant", "content": content });
        if !self.reasoning.is_empty() {
            m["reasoning_content"] = self.reasoning.clone().into();
        }
        if !self.tool_calls.is_empty() {
            m["tool_calls"] = self.tool_calls.clone().into();
        }
        m
    }
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
            Kind::Chat(_) => "chatcmpl",
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

    /// A choice's start: for chat, its reply parser.
    fn received(&self) -> Received {
        let parser = match &self.kind {
            Kind::Chat(format) => Some(format.parser()),
            Kind::Completion => None,
        };
        Received { parser, ..Default::default() }
    }

    /// Adds a token's logprobs to what a choice received.
    fn receive(&self, got: &mut Received, logprobs: Option<(u32, TokenLogprobs)>) {
        let Some((id, lp)) = logprobs else { return };
        let tokenizer = self.text_model.tokenizer();
        match self.kind {
            Kind::Chat(_) => got.chat_logprobs.push(chat_entry(tokenizer, id, &lp)),
            Kind::Completion => got.completion_logprobs.push(tokenizer, id, &lp),
        }
    }

    /// Adds text to what a choice received (`None`: the reply ended), giving back the deltas it
    /// makes certain: `{"content"}` for a completion or plain chat text, `{"reasoning_content"}`,
    /// and for each tool call its header (`index`, `id`, `type`, the name) and its arguments.
    fn absorb(&self, got: &mut Received, text: Option<&str>) -> Vec<Map<String, Value>> {
        let Some(parser) = got.parser.as_mut() else {
            let text = text.unwrap_or_default();
            got.text.push_str(text);
            return if text.is_empty() { Vec::new() } else { vec![delta("content", text.into())] };
        };
        let pieces = match text {
            Some(t) => parser.push(t),
            None => parser.finish(),
        };
        let mut deltas = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Content(t) => {
                    got.text.push_str(&t);
                    deltas.push(delta("content", t.into()));
                }
                Piece::Reasoning(t) => {
                    got.reasoning.push_str(&t);
                    deltas.push(delta("reasoning_content", t.into()));
                }
                Piece::ToolCall { name, arguments } => {
                    let index = got.tool_calls.len();
                    let id = crate::ids::new_id("call");
                    got.tool_calls.push(json!({
                        "id": id, "type": "function", "function": { "name": name, "arguments": arguments },
                    }));
                    let header = json!([{
                        "index": index, "id": id, "type": "function", "function": { "name": name, "arguments": "" },
                    }]);
                    deltas.push(delta("tool_calls", header));
                    deltas
                        .push(delta("tool_calls", json!([{ "index": index, "function": { "arguments": arguments } }])));
                }
            }
        }
        deltas
    }

    /// The `logprobs` of what `got` received since the last call (`null` when not asked for).
    fn take_logprobs(&self, got: &mut Received) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        match self.kind {
            Kind::Chat(_) => chat_logprobs(std::mem::take(&mut got.chat_logprobs)),
            Kind::Completion => got.completion_logprobs.take(),
        }
    }

    /// The whole response, once every choice is done; prompt tokens are counted once.
    pub(super) async fn collect(self, choices: Vec<Choice>) -> Result<Value, ApiError> {
        let (mut prompt, mut completion) = (0, 0);
        let mut objects = Vec::with_capacity(choices.len());
        for (index, Choice { first, mut events }) in choices.into_iter().enumerate() {
            let mut got = self.received();
            let mut next = Some(first);
            loop {
                let event = match next.take() {
                    Some(e) => Some(e),
                    None => events.recv().await,
                };
                match event {
                    Some(JobEvent::Token { text, logprobs }) => {
                        self.absorb(&mut got, Some(&text));
                        self.receive(&mut got, logprobs);
                    }
                    Some(JobEvent::Done { reason, prompt_tokens, completion_tokens }) => {
                        prompt = prompt_tokens;
                        completion += completion_tokens;
                        self.absorb(&mut got, None);
                        let logprobs = self.take_logprobs(&mut got);
                        let reason = got.finish_reason(reason);
                        objects.push(match self.kind {
                            Kind::Chat(_) => json!({
                                "index": index,
                                "message": got.message(),
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
            Kind::Chat(_) => "chat.completion",
            Kind::Completion => "text_completion",
        }
    }

    /// One chunk of choice `index`: chat's `delta` object, or a completion's text (its
    /// `content`).
    fn chunk(&self, index: usize, delta: Map<String, Value>, finish: Option<&str>, lp: Value) -> Value {
        let (object, choice) = match self.kind {
            Kind::Chat(_) => (
                "chat.completion.chunk",
                json!({ "index": index, "delta": delta, "finish_reason": finish, "logprobs": lp }),
            ),
            Kind::Completion => {
                let text = delta.get("content").and_then(Value::as_str).unwrap_or("");
                ("text_completion", json!({ "index": index, "text": text, "finish_reason": finish, "logprobs": lp }))
            }
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
        let mut got: Vec<Received> = (0..n).map(|_| self.received()).collect();
        let mut out = String::new();
        if let Kind::Chat(_) = self.kind {
            for index in 0..n {
                let role = json!({ "role": "assistant", "content": "" });
                sse(&mut out, &self.chunk(index, role.as_object().cloned().unwrap_or_default(), None, Value::Null));
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
                    // Text the parser holds back keeps its logprobs for the chunk that gives it.
                    for d in self.absorb(&mut got[index], Some(&text)) {
                        let lp = self.take_logprobs(&mut got[index]);
                        sse(&mut out, &self.chunk(index, d, None, lp));
                    }
                }
                JobEvent::Done { reason, prompt_tokens, completion_tokens } => {
                    let g = &mut got[index];
                    for d in self.absorb(g, None) {
                        let lp = self.take_logprobs(g);
                        sse(&mut out, &self.chunk(index, d, None, lp));
                    }
                    // Logprobs of tokens that added no text (a character's first bytes) go last.
                    let lp = if g.chat_logprobs.is_empty() && g.completion_logprobs.is_empty() {
                        Value::Null
                    } else {
                        self.take_logprobs(g)
                    };
                    sse(&mut out, &self.chunk(index, Map::new(), Some(g.finish_reason(reason)), lp));
                    (done, completion) = (done + 1, completion + completion_tokens);
                    if done < n {
                        continue;
                    }
                    if self.include_usage {
                        let mut u = self.chunk(index, Map::new(), None, Value::Null);
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

fn delta(key: &str, value: Value) -> Map<String, Value> {
    let mut d = Map::new();
    d.insert(key.into(), value);
    d
}

fn sse(out: &mut String, v: &Value) {
    out.push_str("data: ");
    out.push_str(&v.to_string());
    out.push_str("\n\n");
}
