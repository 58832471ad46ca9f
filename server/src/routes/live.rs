//! GET /v1/audio/transcriptions/live: live transcription over a WebSocket.
//!
//! Query: `model` (required), `encoding` `pcm16` (default; little-endian i16) or `f32`
//! (little-endian), `sample_rate` (default: the model's; other rates are resampled as they
//! stream), `language`. The client sends mono samples as binary messages and a text message
//! `{"type":"end"}` (or closes) when the audio ends; the server answers with JSON text messages
//! `{"type":"transcript.text.delta","delta":...}` as text is decided, then
//! `{"type":"transcript.text.done","text":...,"usage":...}`, or `{"type":"error","error":{...}}`.
//!
//! Bounds: a message over `ws_max_message_bytes` and a socket silent for `ws_idle_timeout_secs`
//! end the session with an error message; a recognizer that falls behind stops the server
//! reading the socket (bounded channels both ways), so a fast sender waits instead of growing
//! the server's memory. With an API key, a browser sends it as subprotocol `bearer.<key>`
//! beside `infer` (crate::auth).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::Response;
use infer_core::audio::{RecognitionOptions, SpeechRecognizer};
use infer_core::audio_io::StreamResampler;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc::{self, OwnedPermit};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{timeout, Instant};

use crate::auth::WS_PROTOCOL;
use crate::error::ApiError;
use crate::state::AppState;

const ENDPOINT: &str = "/v1/audio/transcriptions/live";
/// Audio messages that may wait for the recognizer; past them the socket is not read.
const INPUT_QUEUE: usize = 4;
/// Events that may wait for the socket; past them the recognizer waits.
const OUTPUT_QUEUE: usize = 64;

#[derive(Debug, Deserialize)]
pub struct LiveQuery {
    model: String,
    encoding: Option<String>,
    sample_rate: Option<u32>,
    language: Option<String>,
}

#[derive(Clone, Copy)]
enum Encoding {
    Pcm16,
    F32,
}

impl Encoding {
    fn samples(self, bytes: &[u8]) -> Result<Vec<f32>, String> {
        let (size, name) = match self {
            Encoding::Pcm16 => (2, "pcm16"),
            Encoding::F32 => (4, "f32"),
        };
        if !bytes.len().is_multiple_of(size) {
            return Err(format!(
                "a {name} chunk must hold whole samples ({size} bytes each), got {} bytes",
                bytes.len()
            ));
        }
        Ok(match self {
            Encoding::Pcm16 => {
                bytes.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]]) as f32 / 32768.0).collect()
            }
            Encoding::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        })
    }
}

/// What the socket task hands the recognition thread.
enum Input {
    Samples(Vec<f32>),
    End,
}

pub async fn live_transcription(
    State(state): State<Arc<AppState>>,
    Query(q): Query<LiveQuery>,
    ws: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    let service = state.recognizer(&q.model, ENDPOINT)?;
    let encoding = match q.encoding.as_deref().unwrap_or("pcm16") {
        "pcm16" => Encoding::Pcm16,
        "f32" => Encoding::F32,
        other => return Err(ApiError::param("encoding", format!("encoding `{other}`: expected pcm16 or f32"))),
    };
    let model = service.model.clone();
    let from = q.sample_rate.unwrap_or(model.sample_rate());
    let resampler = if from == model.sample_rate() {
        None
    } else {
        Some(
            StreamResampler::new(from, model.sample_rate())
                .map_err(|e| ApiError::param("sample_rate", e.to_string()))?,
        )
    };
    let Ok(admitted) = service.admission.clone().try_acquire_owned() else {
        return Err(ApiError::queue_full(2));
    };
    let permits = service.permits.clone();
    let options = RecognitionOptions { language: q.language.map(Into::into).into(), ..RecognitionOptions::default() };
    let limit = state.config.ws_max_message_bytes;
    let idle = Duration::from_secs(state.config.ws_idle_timeout_secs);
    let ws = ws.max_message_size(limit).max_frame_size(limit).protocols([WS_PROTOCOL]);
    Ok(ws.on_upgrade(move |socket| async move {
        let Ok(permit) = permits.acquire_owned().await else { return };
        session(socket, model, options, encoding, resampler, idle, (admitted, permit)).await;
    }))
}

/// `{"type":"error","error":{...}}`.
fn error_event(e: &ApiError) -> serde_json::Value {
    let mut body = e.body();
    body["type"] = json!("error");
    body
}

#[allow(clippy::too_many_arguments)]
async fn session(
    mut socket: WebSocket,
    model: Arc<dyn SpeechRecognizer>,
    options: RecognitionOptions,
    encoding: Encoding,
    resampler: Option<StreamResampler>,
    idle: Duration,
    held: (OwnedSemaphorePermit, OwnedSemaphorePermit),
) {
    let (in_tx, in_rx) = mpsc::channel::<Input>(INPUT_QUEUE);
    let (out_tx, mut out_rx) = mpsc::channel::<serde_json::Value>(OUTPUT_QUEUE);
    let worker = tokio::task::spawn_blocking(move || {
        let _held = held;
        let outcome = recognize(model.as_ref(), &options, resampler, in_rx, &out_tx);
        if let Err(e) = outcome {
            let _ = out_tx.blocking_send(error_event(&e));
        }
    });
    // The socket is read only with room in the input queue: a slot reserved first.
    let mut room: Option<OwnedPermit<Input>> = None;
    let silence = tokio::time::sleep(idle);
    tokio::pin!(silence);
    let mut input_open = true;
    let mut failure = None;
    loop {
        tokio::select! {
            out = out_rx.recv() => match out {
                Some(event) => {
                    let last = event["type"] != "transcript.text.delta";
                    // A client that stops reading cannot hold the session: a send has the idle time.
                    let sent = timeout(idle, socket.send(Message::Text(event.to_string().into()))).await;
                    if !matches!(sent, Ok(Ok(()))) || last {
                        break;
                    }
                }
                None => break,
            },
            reserved = in_tx.clone().reserve_owned(), if input_open && room.is_none() => match reserved {
                Ok(p) => {
                    room = Some(p);
                    // The wait for the recognizer is not the client's silence.
                    silence.as_mut().reset(Instant::now() + idle);
                }
                Err(_) => break,
            },
            _ = &mut silence, if room.is_some() => {
                failure = Some(ApiError::invalid(format!(
                    "no message for {} s (ws_idle_timeout_secs): send audio, or {{\"type\":\"end\"}} when it ends",
                    idle.as_secs()
                )));
                break;
            }
            msg = socket.recv(), if room.is_some() => {
                silence.as_mut().reset(Instant::now() + idle);
                let input = match msg {
                    Some(Ok(Message::Binary(b))) => match encoding.samples(&b) {
                        Ok(s) => Input::Samples(s),
                        Err(e) => {
                            failure = Some(ApiError::invalid(e));
                            break;
                        }
                    },
                    Some(Ok(Message::Text(t))) if t.contains("\"end\"") => Input::End,
                    Some(Ok(Message::Text(_) | Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(_))) | None => Input::End,
                    // Over `ws_max_message_bytes`, or a broken frame: the session cannot go on.
                    Some(Err(e)) => {
                        failure = Some(ApiError::invalid(format!("the message could not be read: {e}")));
                        break;
                    }
                };
                if matches!(input, Input::End) {
                    input_open = false;
                }
                if let Some(room) = room.take() {
                    room.send(input);
                }
            }
        }
    }
    if let Some(e) = failure {
        let _ = timeout(idle, socket.send(Message::Text(error_event(&e).to_string().into()))).await;
    }
    // Dropping the input ends a session the client abandoned, and with it the recognizer's
    // permit and admission.
    drop(room);
    drop(in_tx);
    drop(out_rx);
    let _ = worker.await;
    let _ = timeout(idle, socket.send(Message::Close(None))).await;
}

/// The recognition thread: pushes samples as they come and sends each delta.
fn recognize(
    model: &dyn SpeechRecognizer,
    options: &RecognitionOptions,
    mut resampler: Option<StreamResampler>,
    mut input: mpsc::Receiver<Input>,
    out: &mpsc::Sender<serde_json::Value>,
) -> Result<(), ApiError> {
    let core = |e: infer_core::Error| ApiError::from_core(&e);
    let mut session = model.start_session(options).map_err(core)?;
    let mut text = String::new();
    let mut send = |delta: &str| {
        if !delta.is_empty() {
            text.push_str(delta);
            let _ = out.blocking_send(json!({ "type": "transcript.text.delta", "delta": delta }));
        }
    };
    loop {
        match input.blocking_recv() {
            Some(Input::Samples(s)) => {
                let s = match resampler.as_mut() {
                    Some(r) => r.push(&s).map_err(core)?,
                    None => s,
                };
                send(&session.push_audio(&s).map_err(core)?.text);
            }
            Some(Input::End) => break,
            None => return Ok(()), // the client left mid-stream
        }
    }
    if let Some(r) = resampler.take() {
        send(&session.push_audio(&r.finish().map_err(core)?).map_err(core)?.text);
    }
    send(&session.finish().map_err(core)?.text);
    let seconds = session.metrics().audio_seconds;
    let _ = out.blocking_send(json!({
        "type": "transcript.text.done",
        "text": text,
        "usage": { "type": "duration", "seconds": seconds },
    }));
    Ok(())
}
