//! POST /v1/audio/transcriptions: a multipart upload (`file`, `model`, `response_format` json /
//! text / verbose_json, `language`, `stream`), transcribed whole, or streamed as SSE
//! `transcript.text.delta` events while a recognition session consumes the audio in chunks.
//!
//! Bounds: a recognizer's admission is taken when the file part begins, before its bytes are
//! read (a flood of uploads to a busy server gets 429 at once, not after 25 MB each); the decoded
//! audio may last `max_audio_seconds` (413 past it: a small compressed file of silence decodes to
//! gigabytes); the whole request `request_timeout_secs`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::multipart::{Multipart, MultipartError, MultipartRejection};
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use infer_core::audio::{Audio, RecognitionOptions};
use infer_core::audio_io::{decode_audio_within, resample, DecodeFailure, DecodeLimits};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use super::audio::{admit, Deadline};
use crate::error::ApiError;
use crate::state::{AppState, Served};

const ENDPOINT: &str = "/v1/audio/transcriptions";
/// Audio fed to a streaming session per push: 0.5 s at 16 kHz.
const STREAM_CHUNK: usize = 8000;

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Json,
    Text,
    VerboseJson,
}

/// The form fields of an upload.
#[derive(Default)]
struct Upload {
    file: Option<(String, Vec<u8>)>,
    model: Option<String>,
    format: Option<String>,
    language: Option<String>,
    stream: bool,
    /// The admission taken when the file part began, and the recognizer it was taken from.
    admitted: Option<(String, OwnedSemaphorePermit)>,
}

/// `?model=NAME`: names the recognizer before the body, so its own admission is taken.
#[derive(Deserialize)]
pub struct TranscriptionQuery {
    model: Option<String>,
}

/// An admission to hold while the file part is read. With the model named (in the query or a
/// field before the file), that recognizer's; else any recognizer's with room (the upload is
/// exchanged for its own model's once the form names it): uploads being read are bounded by the
/// sum of the recognizers' admissions either way.
fn admit_upload(state: &AppState, model: Option<&str>) -> Result<(String, OwnedSemaphorePermit), ApiError> {
    if let Some(name) = model {
        let service = state.recognizer(name, ENDPOINT)?;
        let permit = admit(&service.admission)?;
        return Ok((name.to_string(), permit));
    }
    let mut recognizers = state
        .models
        .iter()
        .filter_map(|(name, served)| match served {
            Served::Recognizer(r) => Some((name, r)),
            _ => None,
        })
        .peekable();
    if recognizers.peek().is_none() {
        return Err(ApiError::param("model", format!("{ENDPOINT} needs a speech recognition model; none is served")));
    }
    recognizers
        .find_map(|(name, r)| r.admission.clone().try_acquire_owned().ok().map(|p| (name.clone(), p)))
        .ok_or_else(|| ApiError::queue_full(2))
}

fn multipart_error(e: MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large(format!("the upload is too large: {}", e.body_text()))
    } else {
        ApiError::invalid(format!("reading the multipart form: {}", e.body_text()))
    }
}

async fn read_form(mut form: Multipart, state: &AppState, query_model: Option<String>) -> Result<Upload, ApiError> {
    let mut up = Upload { model: query_model.clone(), ..Upload::default() };
    while let Some(field) = form.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_string();
        if name == "file" {
            if up.admitted.is_none() {
                up.admitted = Some(admit_upload(state, up.model.as_deref())?);
            }
            let file_name = field.file_name().unwrap_or("upload").to_string();
            let bytes = field.bytes().await.map_err(multipart_error)?;
            up.file = Some((file_name, bytes.to_vec()));
            continue;
        }
        let value = field.text().await.map_err(multipart_error)?;
        match name.as_str() {
            "model" => match &query_model {
                Some(q) if *q != value => {
                    return Err(ApiError::param(
                        "model",
                        format!("the form names the model `{value}` but the query `{q}`: name one"),
                    ))
                }
                _ => up.model = Some(value),
            },
            "response_format" => up.format = Some(value),
            "language" => up.language = Some(value).filter(|l| !l.is_empty()),
            "stream" => up.stream = value == "true",
            "temperature" if value.parse::<f32>().is_ok_and(|t| t != 0.0) => {
                return Err(ApiError::unsupported("temperature", "transcription is greedy: temperature must be 0"))
            }
            // prompt, timestamp_granularities[], chunking_strategy, include[]: accepted, unused.
            _ => {}
        }
    }
    Ok(up)
}

fn response_format(name: Option<&str>) -> Result<Format, ApiError> {
    match name.unwrap_or("json") {
        "json" => Ok(Format::Json),
        "text" => Ok(Format::Text),
        "verbose_json" => Ok(Format::VerboseJson),
        f @ ("srt" | "vtt") => Err(ApiError::unsupported(
            "response_format",
            format!("{f} needs timestamps, which this recognizer does not give: use json, text or verbose_json"),
        )),
        other => Err(ApiError::param(
            "response_format",
            format!("response_format `{other}`: expected json, text or verbose_json"),
        )),
    }
}

pub async fn transcriptions(
    State(state): State<Arc<AppState>>,
    Query(query): Query<TranscriptionQuery>,
    form: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    let deadline = Deadline::new(state.config.request_timeout_secs);
    let form =
        form.map_err(|e| ApiError::invalid(format!("expected a multipart/form-data upload: {}", e.body_text())))?;
    let up = deadline.within(read_form(form, &state, query.model)).await??;
    let model_name = up.model.ok_or_else(|| ApiError::param("model", "missing form field `model`"))?;
    let service = state.recognizer(&model_name, ENDPOINT)?;
    let format = response_format(up.format.as_deref())?;
    let (file_name, bytes) = up.file.ok_or_else(|| ApiError::param("file", "missing form field `file` (the audio)"))?;
    let ext = std::path::Path::new(&file_name).extension().and_then(|e| e.to_str()).map(str::to_owned);
    // The admission held while the file was read, exchanged for this model's if it was another's.
    let admitted = match up.admitted {
        Some((held, permit)) if held == model_name => permit,
        _ => admit(&service.admission)?,
    };
    let permit = deadline.permit(&service.permits).await?;
    let model = service.model.clone();
    let options =
        RecognitionOptions { language: up.language.clone().map(Into::into).into(), ..RecognitionOptions::default() };
    let limits = DecodeLimits { max_seconds: Some(state.config.max_audio_seconds) };
    // Decoding the upload is part of the blocking work.
    let decode = move || -> Result<Audio, ApiError> {
        match decode_audio_within(bytes, ext.as_deref(), &file_name, &limits) {
            Ok(loaded) => Ok(loaded.audio),
            Err(too_long @ DecodeFailure::TooLong { .. }) => Err(ApiError {
                param: Some("file".into()),
                ..ApiError::too_large(format!("{too_long} (max_audio_seconds)"))
            }),
            Err(DecodeFailure::Unreadable(e)) => {
                Err(ApiError::param("file", format!("not a readable audio file: {e}")))
            }
        }
    };
    if up.stream {
        let (tx, rx) = mpsc::unbounded_channel::<serde_json::Value>();
        tokio::task::spawn_blocking(move || {
            let _held = (admitted, permit);
            let rate = model.sample_rate();
            let outcome = (|| -> Result<Option<(String, f64)>, ApiError> {
                let audio = decode()?;
                let audio = resample(&audio, rate).map_err(|e| ApiError::from_core(&e))?;
                let mut session = model.start_session(&options).map_err(|e| ApiError::from_core(&e))?;
                let mut text = String::new();
                let mut send = |delta: String| {
                    if delta.is_empty() {
                        return true;
                    }
                    text.push_str(&delta);
                    tx.send(json!({ "type": "transcript.text.delta", "delta": delta })).is_ok()
                };
                for chunk in audio.samples.chunks(STREAM_CHUNK) {
                    deadline.check()?;
                    let d = session.push_audio(chunk).map_err(|e| ApiError::from_core(&e))?;
                    if !send(d.text.into()) {
                        return Ok(None); // the client left
                    }
                }
                let d = session.finish().map_err(|e| ApiError::from_core(&e))?;
                send(d.text.into());
                Ok(Some((text, session.metrics().audio_seconds)))
            })();
            let _ = tx.send(match outcome {
                Ok(Some((text, seconds))) => json!({
                    "type": "transcript.text.done",
                    "text": text,
                    "usage": { "type": "duration", "seconds": seconds },
                }),
                Ok(None) => return,
                Err(e) => e.body(),
            });
        });
        let body = UnboundedReceiverStream::new(rx).map(|e| Ok::<_, Infallible>(format!("data: {e}\n\n")));
        return Ok(Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .body(Body::from_stream(body))
            .expect("static headers"));
    }
    // `transcribe` cannot be interrupted: past the deadline the client gets its error and the
    // work finishes in the background, its permit held until then.
    let transcript = deadline
        .within(tokio::task::spawn_blocking(move || {
            let _held = (admitted, permit);
            let audio = decode()?;
            model.transcribe(&audio, &options).map_err(|e| ApiError::from_core(&e))
        }))
        .await?
        .map_err(|e| ApiError::internal(format!("transcription task failed: {e}")))??;
    let seconds = transcript.metrics.audio_seconds;
    Ok(match format {
        Format::Text => String::from(transcript.text).into_response(),
        Format::Json => Json(json!({ "text": transcript.text, "usage": { "type": "duration", "seconds": seconds } }))
            .into_response(),
        Format::VerboseJson => Json(json!({
            "task": "transcribe",
            "language": up.language.unwrap_or_else(|| "unknown".into()),
            "duration": seconds,
            "text": transcript.text,
            "segments": [{
                "id": 0, "seek": 0, "start": 0.0, "end": seconds, "text": transcript.text,
                "tokens": transcript.tokens, "temperature": 0.0,
                "avg_logprob": 0.0, "compression_ratio": 1.0, "no_speech_prob": 0.0,
            }],
            "usage": { "type": "duration", "seconds": seconds },
        }))
        .into_response(),
    })
}
