//! POST /v1/chat/completions and /v1/completions: prompt ids in, the scheduler's tokens out, as
//! one JSON object or as server-sent events (`data: {chunk}` ... `data: [DONE]`).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use infer_core::{FinishReason, GenerateConfig};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::batching::{JobEvent, TextService};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::openai::{ChatRequest, CompletionRequest, Prompt};
use crate::state::AppState;

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    let text = state.text(&req.model, "/v1/chat/completions")?;
    req.check_supported()?;
    let messages = req.messages()?;
    let cfg = req.sampling.generate_config(state.config.default_max_tokens)?;
    let prompt = text.model.chat_ids(&messages).map_err(|e| match e {
        infer_core::Error::Unsupported(_) => ApiError::param(
            "model",
            format!("`{}` has no chat template: send the prompt to /v1/completions instead", req.model),
        ),
        other => ApiError::from_core(&other),
    })?;
    let reply = Reply::new(Kind::Chat, &req.model, req.stream_options.is_some_and(|o| o.include_usage));
    generate(text, prompt, cfg, reply, req.stream).await
}

pub async fn completions(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let text = state.text(&req.model, "/v1/completions")?;
    req.check_supported()?;
    let cfg = req.sampling.generate_config(state.config.default_max_tokens)?;
    let tokenizer = text.model.tokenizer();
    let encode = |s: &str| {
        if s.is_empty() {
            return Err(ApiError::param("prompt", "the prompt is empty"));
        }
        tokenizer.encode(s, tokenizer.adds_bos()).map_err(|e| ApiError::from_core(&e))
    };
    let one = "only one prompt per request is supported: send one request per prompt";
    let prompt = match &req.prompt {
        Prompt::Text(s) => encode(s)?,
        Prompt::Texts(v) if v.len() == 1 => encode(&v[0])?,
        Prompt::Ids(ids) => ids.clone(),
        Prompt::IdLists(v) if v.len() == 1 => v[0].clone(),
        _ => return Err(ApiError::unsupported("prompt", one)),
    };
    let reply = Reply::new(Kind::Completion, &req.model, req.stream_options.is_some_and(|o| o.include_usage));
    generate(text, prompt, cfg, reply, req.stream).await
}

async fn generate(
    text: &TextService,
    prompt: Vec<u32>,
    cfg: GenerateConfig,
    reply: Reply,
    stream: bool,
) -> Result<Response, ApiError> {
    let limit = text.context_limit();
    if prompt.is_empty() {
        return Err(ApiError::param("prompt", "the prompt is empty"));
    }
    if limit > 0 && prompt.len() >= limit {
        return Err(ApiError::context_length(format!(
            "the prompt is {} tokens; `{}` has a context of {limit} tokens",
            prompt.len(),
            text.name
        )));
    }
    let mut events = text.submit(prompt, cfg)?;
    // Wait for the first event, so a request the batch refuses still gets a proper status.
    let first = events.recv().await.ok_or_else(|| ApiError::internal("the scheduler stopped"))?;
    if let JobEvent::Failed(e) = first {
        return Err(e);
    }
    if stream {
        Ok(reply.stream(first, events))
    } else {
        reply.collect(first, events).await.map(|v| Json(v).into_response())
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Chat,
    Completion,
}

/// Builds the response objects of one request.
struct Reply {
    kind: Kind,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
}

impl Reply {
    fn new(kind: Kind, model: &str, include_usage: bool) -> Self {
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
        }
    }

    fn usage(prompt: usize, completion: usize) -> Value {
        json!({ "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion })
    }

    async fn collect(self, first: JobEvent, mut events: UnboundedReceiver<JobEvent>) -> Result<Value, ApiError> {
        let mut text = String::new();
        let mut next = Some(first);
        loop {
            let event = match next.take() {
                Some(e) => Some(e),
                None => events.recv().await,
            };
            match event {
                Some(JobEvent::Token(t)) => text.push_str(&t),
                Some(JobEvent::Done { reason, prompt_tokens, completion_tokens }) => {
                    let choice = match self.kind {
                        Kind::Chat => json!({
                            "index": 0,
                            "message": { "role": "assistant", "content": text },
                            "finish_reason": reason.as_str(),
                            "logprobs": null,
                        }),
                        Kind::Completion => {
                            json!({ "index": 0, "text": text, "finish_reason": reason.as_str(), "logprobs": null })
                        }
                    };
                    return Ok(json!({
                        "id": self.id,
                        "object": self.object(),
                        "created": self.created,
                        "model": self.model,
                        "choices": [choice],
                        "usage": Self::usage(prompt_tokens, completion_tokens),
                    }));
                }
                Some(JobEvent::Failed(e)) => return Err(e),
                None => return Err(ApiError::internal("the generation ended without a result")),
            }
        }
    }

    fn object(&self) -> &'static str {
        match self.kind {
            Kind::Chat => "chat.completion",
            Kind::Completion => "text_completion",
        }
    }

    fn chunk(&self, delta: Option<&str>, role: bool, finish: Option<FinishReason>) -> Value {
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
                ("chat.completion.chunk", json!({ "index": 0, "delta": d, "finish_reason": finish, "logprobs": null }))
            }
            Kind::Completion => (
                "text_completion",
                json!({ "index": 0, "text": delta.unwrap_or(""), "finish_reason": finish, "logprobs": null }),
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

    /// One SSE body: a chunk per token (a first one with the role, for chat), a last one with
    /// the finish reason, the usage chunk when asked for, and `[DONE]`; a failure mid-way ends
    /// the stream with an error event instead. Dropping the body (client gone) drops the
    /// receiver, which cancels the generation at the next step.
    fn stream(self, first: JobEvent, events: UnboundedReceiver<JobEvent>) -> Response {
        let mut opened = false;
        let head = tokio_stream::once(first);
        let body = head.chain(UnboundedReceiverStream::new(events)).map(move |event| {
            let mut out = String::new();
            if !opened {
                opened = true;
                if let Kind::Chat = self.kind {
                    sse(&mut out, &self.chunk(Some(""), true, None));
                }
            }
            match event {
                JobEvent::Token(t) if t.is_empty() => {}
                JobEvent::Token(t) => sse(&mut out, &self.chunk(Some(&t), false, None)),
                JobEvent::Done { reason, prompt_tokens, completion_tokens } => {
                    sse(&mut out, &self.chunk(None, false, Some(reason)));
                    if self.include_usage {
                        let mut u = self.chunk(None, false, None);
                        u["choices"] = json!([]);
                        u["usage"] = Self::usage(prompt_tokens, completion_tokens);
                        sse(&mut out, &u);
                    }
                    out.push_str("data: [DONE]\n\n");
                }
                JobEvent::Failed(e) => sse(&mut out, &e.body()),
            }
            Ok::<_, Infallible>(out)
        });
        // An empty chunk could read as the end of a chunked body.
        let body = body.filter(|chunk| chunk.as_ref().is_ok_and(|s| !s.is_empty()));
        Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .body(Body::from_stream(body))
            .expect("static headers")
    }
}

fn sse(out: &mut String, v: &Value) {
    out.push_str("data: ");
    out.push_str(&v.to_string());
    out.push_str("\n\n");
}
