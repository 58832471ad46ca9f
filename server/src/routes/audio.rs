//! POST /v1/audio/speech (text to speech: a whole file, chunked audio bytes as frames decode, or
//! SSE deltas). Speech recognition lives in `transcription.rs` and `live.rs`.

use std::convert::Infallible;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::Response;
use base64::Engine;
use infer_core::audio::{AudioMetrics, SpeechOptions, Voice};
use infer_core::audio_io::{stream_writer, AudioFormat};
use infer_core::CancelToken;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::state::{AppState, SpeechService};

/// The OpenAI API's limit on `input`.
const MAX_INPUT_CHARS: usize = 4096;
/// Codec frames per streamed chunk (Qwen3-TTS: 12.5 frames a second, so about 1 s).
const STREAM_FRAMES: usize = 12;

#[derive(Debug, Deserialize)]
pub struct SpeechRequest {
    model: String,
    input: String,
    voice: Option<String>,
    response_format: Option<String>,
    speed: Option<f32>,
    stream_format: Option<String>,
    instructions: Option<String>,
    // Extensions: sampling of the codec tokens, and the language.
    language: Option<String>,
    temperature: Option<f32>,
    top_k: Option<usize>,
    top_p: Option<f32>,
    seed: Option<u64>,
    max_frames: Option<usize>,
}

/// When a speech request must be done by (`request_timeout_secs`, 0: never), from its arrival.
#[derive(Clone, Copy)]
pub(super) struct Deadline {
    at: Option<Instant>,
    secs: u64,
}

impl Deadline {
    pub fn new(secs: u64) -> Self {
        Deadline { at: (secs > 0).then(|| Instant::now() + Duration::from_secs(secs)), secs }
    }

    /// The error of a request past its deadline: 504, naming the limit.
    pub fn error(&self) -> ApiError {
        ApiError {
            status: StatusCode::GATEWAY_TIMEOUT,
            kind: "server_error",
            code: Some("request_timeout"),
            message: format!("the request ran past the server's limit of {} s (request_timeout_secs)", self.secs),
            param: None,
            retry_after: None,
        }
    }

    pub fn passed(&self) -> bool {
        self.at.is_some_and(|at| Instant::now() >= at)
    }

    /// `Err` once the deadline has passed (for work that checks between steps).
    pub fn check(&self) -> Result<(), ApiError> {
        if self.passed() {
            return Err(self.error());
        }
        Ok(())
    }

    /// `work`, or the deadline's error if it is not done by then.
    pub async fn within<T>(&self, work: impl std::future::Future<Output = T>) -> Result<T, ApiError> {
        match self.at {
            None => Ok(work.await),
            Some(at) => tokio::time::timeout_at(at.into(), work).await.map_err(|_| self.error()),
        }
    }

    /// A permit to run, waited for until the deadline (a 504 past it, a 503 once the server
    /// stops handing them out).
    pub async fn permit(&self, permits: &Arc<Semaphore>) -> Result<OwnedSemaphorePermit, ApiError> {
        self.within(permits.clone().acquire_owned()).await?.map_err(|_| ApiError::unavailable("shutting down"))
    }

    /// Cancels `cancel` when the deadline passes; the returned guard stops the timer.
    fn cancel_at(&self, cancel: CancelToken) -> Option<AbortOnDrop> {
        let at = self.at?;
        Some(AbortOnDrop(tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            cancel.cancel();
        })))
    }
}

/// A place among the requests that may run or wait; none left is a 429.
pub(super) fn admit(admission: &Arc<Semaphore>) -> Result<OwnedSemaphorePermit, ApiError> {
    admission.clone().try_acquire_owned().map_err(|_| ApiError::queue_full(2))
}

/// Stops a timer task when the request it watches is done.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Clone, Copy, PartialEq)]
enum StreamFormat {
    Whole,
    Audio,
    Sse,
}

pub async fn speech(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<SpeechRequest>,
) -> Result<Response, ApiError> {
    let deadline = Deadline::new(state.config.request_timeout_secs);
    let service = state.speech(&req.model)?;
    let format = response_format(req.response_format.as_deref())?;
    let stream = match req.stream_format.as_deref() {
        None => StreamFormat::Whole,
        Some("audio") => StreamFormat::Audio,
        Some("sse") => StreamFormat::Sse,
        Some(other) => {
            return Err(ApiError::param("stream_format", format!("stream_format `{other}`: expected audio or sse")))
        }
    };
    let options = speech_options(&req, service)?;
    let admitted = admit(&service.admission)?;
    let permit = deadline.permit(&service.permits).await?;
    let model = service.model.clone();
    let rate = model.sample_rate();
    let (tx, rx) = mpsc::unbounded_channel::<SpeechEvent>();
    let cancel = CancelToken::new();
    let guard = CancelOnDrop(cancel.clone());
    // At the deadline the synthesis is cancelled and ends with the deadline's error.
    let timer = deadline.cancel_at(cancel.clone());
    let text = req.input;
    tokio::task::spawn_blocking(move || {
        let _held = (admitted, permit, timer);
        let sink_tx = tx.clone();
        let outcome = (|| {
            let mut sink = stream_writer(Box::new(ChannelWriter(sink_tx)), "response", format, rate)?;
            let mut failed = None;
            let metrics = model.synthesize(&text, &options, &cancel, &mut |chunk| {
                if !chunk.samples.is_empty() {
                    if let Err(e) = sink.write(&chunk.samples) {
                        failed = Some(e);
                        return false;
                    }
                }
                // A departed client stops synthesis.
                !tx.is_closed()
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
            sink.finish()?;
            Ok(metrics)
        })();
        let _ = tx.send(match outcome {
            Ok(m) => SpeechEvent::Done(m),
            Err(_) if deadline.passed() => SpeechEvent::Failed(deadline.error()),
            Err(e) => SpeechEvent::Failed(ApiError::from_core(&e)),
        });
    });
    match stream {
        StreamFormat::Whole => whole(rx, format, guard).await,
        StreamFormat::Audio => Ok(audio_stream(rx, format, guard)),
        StreamFormat::Sse => Ok(sse_stream(rx, guard)),
    }
}

/// What the synthesis task sends: encoded bytes as they are produced, then the end.
enum SpeechEvent {
    Bytes(Vec<u8>),
    Done(AudioMetrics),
    Failed(ApiError),
}

/// An encoder's output that goes to the response.
struct ChannelWriter(mpsc::UnboundedSender<SpeechEvent>);

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !buf.is_empty() {
            self.0.send(SpeechEvent::Bytes(buf.to_vec())).map_err(|_| std::io::Error::other("client disconnected"))?;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Cancels the synthesis when the response (or the waiting handler) is dropped.
struct CancelOnDrop(CancelToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

fn response_format(name: Option<&str>) -> Result<AudioFormat, ApiError> {
    match name.unwrap_or("mp3") {
        "aac" => Err(ApiError::unsupported(
            "response_format",
            "aac is not supported (no AAC encoder in this build): use mp3, opus, flac, wav or pcm",
        )),
        f @ ("mp3" | "opus" | "flac" | "wav" | "pcm") => {
            let format = AudioFormat::from_name(f).map_err(|e| ApiError::param("response_format", e.to_string()))?;
            if !format.available() {
                return Err(ApiError::unsupported("response_format", format!("{f} is not available in this build")));
            }
            Ok(format)
        }
        other => Err(ApiError::param(
            "response_format",
            format!("response_format `{other}`: expected mp3, opus, aac, flac, wav or pcm"),
        )),
    }
}

fn content_type(format: AudioFormat) -> &'static str {
    match format {
        AudioFormat::Mp3 => "audio/mpeg",
        AudioFormat::Opus => "audio/ogg",
        AudioFormat::Flac => "audio/flac",
        AudioFormat::Wav | AudioFormat::WavF32 => "audio/wav",
        AudioFormat::Pcm => "audio/pcm",
    }
}

fn speech_options(req: &SpeechRequest, service: &SpeechService) -> Result<SpeechOptions, ApiError> {
    if req.input.trim().is_empty() {
        return Err(ApiError::param("input", "input is empty"));
    }
    if req.input.chars().count() > MAX_INPUT_CHARS {
        return Err(ApiError::param("input", format!("input is longer than {MAX_INPUT_CHARS} characters")));
    }
    if req.speed.is_some_and(|s| s != 1.0) {
        return Err(ApiError::unsupported("speed", "speed other than 1.0 is not supported"));
    }
    if req.instructions.as_ref().is_some_and(|i| !i.trim().is_empty()) {
        return Err(ApiError::unsupported("instructions", "instructions are not supported by this model"));
    }
    let voices = service.model.voices();
    let voice = match req.voice.as_deref() {
        None | Some("" | "default") => Voice::Default,
        Some(v) if voices.iter().any(|n| n == v) => Voice::Preset(v.into()),
        Some(v) => {
            let known =
                if voices.is_empty() { "default".to_string() } else { format!("default, {}", voices.join(", ")) };
            return Err(ApiError::param("voice", format!("unknown voice `{v}` (this model has: {known})")));
        }
    };
    let defaults = SpeechOptions::default();
    Ok(SpeechOptions {
        voice,
        language: req.language.clone().map(Into::into).into(),
        temperature: req.temperature.unwrap_or(defaults.temperature),
        top_k: req.top_k.unwrap_or(defaults.top_k),
        top_p: req.top_p.unwrap_or(defaults.top_p),
        seed: req.seed.into(),
        max_frames: req.max_frames.unwrap_or(defaults.max_frames).max(1),
        stream_frames: STREAM_FRAMES,
        // The first chunk after one frame: time to first audio is one frame's work.
        first_chunk_frames: 1,
        ..defaults
    })
}

async fn whole(
    mut rx: mpsc::UnboundedReceiver<SpeechEvent>,
    format: AudioFormat,
    _guard: CancelOnDrop,
) -> Result<Response, ApiError> {
    let mut bytes = Vec::new();
    loop {
        match rx.recv().await {
            Some(SpeechEvent::Bytes(b)) => bytes.extend(b),
            Some(SpeechEvent::Done(_)) => break,
            Some(SpeechEvent::Failed(e)) => return Err(e),
            None => return Err(ApiError::internal("synthesis ended without a result")),
        }
    }
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, content_type(format))
        .body(Body::from(bytes))
        .expect("static headers"))
}

/// Encoded audio bytes as frames decode (chunked transfer). A failure mid-way can only end
/// the body early: it is logged.
fn audio_stream(rx: mpsc::UnboundedReceiver<SpeechEvent>, format: AudioFormat, guard: CancelOnDrop) -> Response {
    let body = UnboundedReceiverStream::new(rx).filter_map(move |e| {
        let _ = &guard;
        match e {
            SpeechEvent::Bytes(b) => Some(Ok::<_, Infallible>(b)),
            SpeechEvent::Done(_) => None,
            SpeechEvent::Failed(e) => {
                tracing::error!("speech stream failed: {e}");
                None
            }
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, content_type(format))
        .body(Body::from_stream(body))
        .expect("static headers")
}

/// `speech.audio.delta` events with base64 audio, then `speech.audio.done`.
fn sse_stream(rx: mpsc::UnboundedReceiver<SpeechEvent>, guard: CancelOnDrop) -> Response {
    let body = UnboundedReceiverStream::new(rx).map(move |e| {
        let _ = &guard;
        let event = match e {
            SpeechEvent::Bytes(b) => json!({
                "type": "speech.audio.delta",
                "audio": base64::engine::general_purpose::STANDARD.encode(b),
            }),
            SpeechEvent::Done(m) => json!({
                "type": "speech.audio.done",
                "usage": { "audio_seconds": m.audio_seconds, "frames": m.frames },
            }),
            SpeechEvent::Failed(e) => e.body(),
        };
        Ok::<_, Infallible>(format!("data: {event}\n\n"))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .expect("static headers")
}
