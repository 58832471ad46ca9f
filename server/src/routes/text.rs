//! POST /v1/chat/completions and /v1/completions: prompt ids in, the scheduler's tokens out, as
//! one JSON object or as server-sent events (`data: {chunk}` ... `data: [DONE]`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use infer_core::{FinishReason, GenerateConfig, TextModel};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::batching::{Fault, JobEvent, TextService};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::openai::{ChatRequest, CompletionRequest, Prompt, RequestLimits};
use crate::state::AppState;

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let text = state.text(&req.model, "/v1/chat/completions")?;
    req.check_supported()?;
    let messages = req.messages()?;
    let cfg = req.sampling.generate_config(RequestLimits::of(&state.config))?;
    let name = req.model.clone();
    let prompt = prepare(text, move |model| {
        model.chat_ids(&messages).map_err(|e| match e {
            infer_core::Error::Unsupported(_) => ApiError::param(
                "model",
                format!("`{name}` has no chat template: send the prompt to /v1/completions instead"),
            ),
            other => ApiError::from_core(&other),
        })
    })
    .await?;
    let reply = Reply::new(Kind::Chat, &req.model, req.stream_options.is_some_and(|o| o.include_usage));
    let fault = Fault::from_user(req.sampling.user.as_deref());
    generate(text, Prepared { prompt, cfg, arrived, fault }, reply, req.stream).await
}

pub async fn completions(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let text = state.text(&req.model, "/v1/completions")?;
    req.check_supported()?;
    let cfg = req.sampling.generate_config(RequestLimits::of(&state.config))?;
    let one = "only one prompt per request is supported: send one request per prompt";
    let fault = Fault::from_user(req.sampling.user.as_deref());
    let reply = Reply::new(Kind::Completion, &req.model, req.stream_options.is_some_and(|o| o.include_usage));
    let prompt = match req.prompt {
        Prompt::Ids(ids) => ids,
        Prompt::IdLists(mut v) if v.len() == 1 => v.remove(0),
        Prompt::Text(s) => encode(text, s).await?,
        Prompt::Texts(mut v) if v.len() == 1 => encode(text, v.remove(0)).await?,
        _ => return Err(ApiError::unsupported("prompt", one)),
    };
    generate(text, Prepared { prompt, cfg, arrived, fault }, reply, req.stream).await
}

async fn encode(text: &TextService, prompt: String) -> Result<Vec<u32>, ApiError> {
    if prompt.is_empty() {
        return Err(ApiError::param("prompt", "the prompt is empty"));
    }
    prepare(text, move |model| {
        let tokenizer = model.tokenizer();
        tokenizer.encode(&prompt, tokenizer.adds_bos()).map_err(|e| ApiError::from_core(&e))
    })
    .await
}

/// Runs a template render or tokenization on the blocking pool, at most `prepare_tasks` at once:
/// a long prompt costs seconds of CPU that must not hold an async worker (every stream's bytes go
/// through those). The permit lives as long as the work, even when the client leaves.
async fn prepare<T: Send + 'static>(
    text: &TextService,
    work: impl FnOnce(&dyn TextModel) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let permit =
        text.prepare.clone().acquire_owned().await.map_err(|_| ApiError::unavailable("the server is shutting down"))?;
    let model = text.model.clone();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work(model.as_ref())
    })
    .await
    .map_err(|e| ApiError::internal(format!("preparing the prompt failed: {e}")))?
}

/// A request ready for the scheduler.
struct Prepared {
    prompt: Vec<u32>,
    cfg: GenerateConfig,
    arrived: Instant,
    fault: Option<Fault>,
}

async fn generate(text: &TextService, req: Prepared, reply: Reply, stream: bool) -> Result<Response, ApiError> {
    let Prepared { prompt, mut cfg, arrived, fault } = req;
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
    // A bounded context also bounds the completion; `finish_reason` "length" says it was cut.
    if limit > 0 {
        cfg.max_tokens = cfg.max_tokens.min(limit - prompt.len());
    }
    let deadline = text.deadline(arrived);
    let timed_out = || ApiError::timeout("the request reached request_timeout_secs before its first token");
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(timed_out());
    }
    let mut events = text.submit(prompt, cfg, arrived, fault)?;
    // Wait for the first event, so a request the batch refuses still gets a proper status; one
    // still queued at its deadline is answered here (dropping the receiver cancels it).
    let first = match deadline {
        Some(d) => tokio::time::timeout_at(d.into(), events.recv()).await.map_err(|_| timed_out())?,
        None => events.recv().await,
    };
    let first = first.ok_or_else(|| text.stopped())?;
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
