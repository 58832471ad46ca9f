//! POST /v1/chat/completions and /v1/completions: prompt ids in, each choice a sequence of the
//! scheduler's batch, its tokens out ([`reply`]: one JSON object or server-sent events).

mod reply;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use infer_core::{GenerateConfig, TextModel};

use crate::batching::{Fault, JobEvent, TextService};
use crate::chat_tools::{ReplyFormat, ToolRequest};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::openai::{ChatRequest, CompletionRequest, Prompt, RequestLimits, Sampling};
use crate::state::AppState;
use crate::structured_output::chat_constraint;
use reply::{Choice, Kind, Reply};

/// The generation settings of a request to `text` ([`Sampling::generate_config`] with the
/// model's defaults and vocabulary), asking for `logprobs` alternatives per token when set.
fn generate_config(
    sampling: &Sampling,
    state: &AppState,
    text: &TextService,
    logprobs: Option<usize>,
) -> Result<GenerateConfig, ApiError> {
    let vocab = text.model.info().vocab_size;
    let cfg = sampling.generate_config(RequestLimits::of(&state.config), &text.model.sampling_defaults(), vocab)?;
    Ok(GenerateConfig { logprobs, ..cfg })
}

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let (name, text) = state.text(req.model.as_deref(), "/v1/chat/completions")?;
    let answer = req.answer_constraint()?;
    let logprobs = req.logprobs()?;
    let mut cfg = generate_config(&req.sampling, &state, text, logprobs)?;
    let n = req.sampling.choices()?;
    let usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
    let name = name.to_string();
    let RenderedChat { ids: prompt, format, tools, .. } = render_chat(text, &req, &name).await?;
    cfg.constraint = chat_constraint(answer, tools.as_ref(), &format)?;
    let reply = Reply::new(Kind::Chat(format), &name, usage, logprobs.is_some(), text.model.clone());
    let fault = Fault::from_user(req.sampling.user.as_deref());
    generate(text, Prepared { prompt, cfg, n, arrived, fault }, reply, req.stream).await
}

/// POST /apply-template (llama-server's): the prompt a chat request renders to, as the model
/// reads it (a required tool call's opener included), without generating.
pub async fn apply_template(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<ChatRequest>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (name, text) = state.text(req.model.as_deref(), "/apply-template")?;
    let name = name.to_string();
    let RenderedChat { text: prompt, format, .. } = render_chat(text, &req, &name).await?;
    let prompt = prompt + format.opener.as_deref().unwrap_or("");
    Ok(Json(serde_json::json!({ "prompt": prompt })))
}

/// A chat request rendered through the model's template.
struct RenderedChat {
    text: String,
    /// The prompt ids, with a required call's opener.
    ids: Vec<u32>,
    format: ReplyFormat,
    /// The tools the model may call.
    tools: Option<ToolRequest>,
}

async fn render_chat(text: &TextService, req: &ChatRequest, name: &str) -> Result<RenderedChat, ApiError> {
    let tools = req.tool_request()?;
    let conversation = req.conversation(tools.as_ref())?;
    let name = name.to_string();
    prepare(text, move |model| {
        if model.chat_template().is_none() {
            return Err(ApiError::param(
                "model",
                format!("`{name}` has no chat template: send the prompt to /v1/completions instead"),
            ));
        }
        let rendered = model.conversation_prompt(&conversation).map_err(|e| match e {
            infer_core::Error::Unsupported(why) => ApiError::unsupported("tools", why),
            other => ApiError::from_core(&other),
        })?;
        let format = ReplyFormat::of_prompt(&rendered.text, tools.as_ref(), &name)?;
        let mut ids = rendered.ids;
        if let Some(opener) = &format.opener {
            ids.extend(model.tokenizer().encode(opener, false).map_err(|e| ApiError::from_core(&e))?);
        }
        Ok(RenderedChat { text: rendered.text, ids, format, tools })
    })
    .await
}

pub async fn completions(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let (name, text) = state.text(req.model.as_deref(), "/v1/completions")?;
    req.check_supported()?;
    let logprobs = req.logprobs()?;
    let cfg = GenerateConfig {
        constraint: req.output.constraint(None)?,
        ..generate_config(&req.sampling, &state, text, logprobs)?
    };
    let n = req.sampling.choices()?;
    let one = "only one prompt per request is supported: send one request per prompt";
    let fault = Fault::from_user(req.sampling.user.as_deref());
    let usage = req.stream_options.is_some_and(|o| o.include_usage);
    let reply = Reply::new(Kind::Completion, name, usage, logprobs.is_some(), text.model.clone());
    let prompt = match req.prompt {
        Prompt::Ids(ids) => ids,
        Prompt::IdLists(mut v) if v.len() == 1 => v.remove(0),
        Prompt::Text(s) => encode(text, s).await?,
        Prompt::Texts(mut v) if v.len() == 1 => encode(text, v.remove(0)).await?,
        _ => return Err(ApiError::unsupported("prompt", one)),
    };
    generate(text, Prepared { prompt, cfg, n, arrived, fault }, reply, req.stream).await
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
pub(super) async fn prepare<T: Send + 'static>(
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
    /// Choices: each its own sequence in the batch.
    n: usize,
    arrived: Instant,
    fault: Option<Fault>,
}

async fn generate(text: &TextService, req: Prepared, reply: Reply, stream: bool) -> Result<Response, ApiError> {
    let Prepared { prompt, mut cfg, n, arrived, fault } = req;
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
    let mut receivers = Vec::with_capacity(n);
    for i in 0..n {
        // Each choice its own draws: choice i seeds with seed + i (choice 0 with the seed, as
        // n = 1 does); unseeded ones each seed from the OS.
        let cfg = GenerateConfig { seed: cfg.seed.map(|s| s.wrapping_add(i as u64)), ..cfg.clone() };
        // A refusal drops the choices already queued, which cancels them.
        receivers.push(text.submit(prompt.clone(), cfg, arrived, fault)?);
    }
    let mut choices = Vec::with_capacity(n);
    for mut events in receivers {
        // Wait for the first event, so a request the batch refuses still gets a proper status;
        // one still queued at its deadline is answered here (dropping the receivers cancels it).
        let first = match deadline {
            Some(d) => tokio::time::timeout_at(d.into(), events.recv()).await.map_err(|_| timed_out())?,
            None => events.recv().await,
        };
        let first = first.ok_or_else(|| text.stopped())?;
        if let JobEvent::Failed(e) = first {
            return Err(e);
        }
        choices.push(Choice { first, events });
    }
    if stream {
        Ok(reply.stream(choices))
    } else {
        reply.collect(choices).await.map(|v| Json(v).into_response())
    }
}
