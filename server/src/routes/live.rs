//! GET /v1/audio/transcriptions/live: live transcription over a WebSocket.
//!
//! Query: `model` (required), `encoding` `pcm16` (default; little-endian i16) or `f32`
//! (little-endian), `sample_rate` (default: the model's; other rates are resampled as they
//! stream), `language`. The client sends mono samples as binary messages and a text message
//! `{"type":"end"}` (or closes) when the audio ends; the server answers with JSON text messages
//! `{"type":"transcript.text.delta","delta":...}` as text is decided, then
//! `{"type":"transcript.text.done","text":...,"usage":...}`, or `{"type":"error","error":{...}}`.

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::Response;
use infer_core::audio::{RecognitionOptions, SpeechRecognizer};
use infer_core::audio_io::StreamResampler;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{mpsc, OwnedSemaphorePermit};

use crate::error::ApiError;
use crate::state::AppState;

const ENDPOINT: &str = "/v1/audio/transcriptions/live";

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
    let options = RecognitionOptions { language: q.language, ..RecognitionOptions::default() };
    Ok(ws.on_upgrade(move |socket| async move {
        let Ok(permit) = permits.acquire_owned().await else { return };
        session(socket, model, options, encoding, resampler, (admitted, permit)).await;
    }))
}

async fn session(
    mut socket: WebSocket,
    model: Arc<dyn SpeechRecognizer>,
    options: RecognitionOptions,
    encoding: Encoding,
    resampler: Option<StreamResampler>,
    held: (OwnedSemaphorePermit, OwnedSemaphorePermit),
) {
    let (in_tx, in_rx) = mpsc::unbounded_channel::<Input>();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<serde_json::Value>();
    let worker = tokio::task::spawn_blocking(move || {
        let _held = held;
        let outcome = recognize(model.as_ref(), &options, resampler, in_rx, &out_tx);
        if let Err(e) = outcome {
            let mut body = e.body();
            body["type"] = json!("error");
            let _ = out_tx.send(body);
        }
    });
    let mut input_open = true;
    loop {
        tokio::select! {
            out = out_rx.recv() => match out {
                Some(event) => {
                    let last = event["type"] != "transcript.text.delta";
                    if socket.send(Message::Text(event.to_string().into())).await.is_err() || last {
                        break;
                    }
                }
                None => break,
            },
            msg = socket.recv(), if input_open => {
                let input = match msg {
                    Some(Ok(Message::Binary(b))) => match encoding.samples(&b) {
                        Ok(s) => Input::Samples(s),
                        Err(e) => {
                            let e = ApiError::invalid(e);
                            let mut body = e.body();
                            body["type"] = json!("error");
                            let _ = socket.send(Message::Text(body.to_string().into())).await;
                            break;
                        }
                    },
                    Some(Ok(Message::Text(t))) if t.contains("\"end\"") => Input::End,
                    Some(Ok(Message::Text(_) | Message::Ping(_) | Message::Pong(_))) => continue,
                    // Closed or broken: the audio has ended.
                    Some(Ok(Message::Close(_)) | Err(_)) | None => Input::End,
                };
                if matches!(input, Input::End) {
                    input_open = false;
                }
                if in_tx.send(input).is_err() {
                    break;
                }
            }
        }
    }
    // Dropping the input ends a session the client abandoned.
    drop(in_tx);
    let _ = worker.await;
    let _ = socket.send(Message::Close(None)).await;
}

/// The recognition thread: pushes samples as they come and sends each delta.
fn recognize(
    model: &dyn SpeechRecognizer,
    options: &RecognitionOptions,
    mut resampler: Option<StreamResampler>,
    mut input: mpsc::UnboundedReceiver<Input>,
    out: &mpsc::UnboundedSender<serde_json::Value>,
) -> Result<(), ApiError> {
    let core = |e: infer_core::Error| ApiError::from_core(&e);
    let mut session = model.start_session(options).map_err(core)?;
    let mut text = String::new();
    let mut send = |delta: String| {
        if !delta.is_empty() {
            text.push_str(&delta);
            let _ = out.send(json!({ "type": "transcript.text.delta", "delta": delta }));
        }
    };
    loop {
        match input.blocking_recv() {
            Some(Input::Samples(s)) => {
                let s = match resampler.as_mut() {
                    Some(r) => r.push(&s).map_err(core)?,
                    None => s,
                };
                send(session.push_audio(&s).map_err(core)?.text);
            }
            Some(Input::End) => break,
            None => return Ok(()), // the client left mid-stream
        }
    }
    if let Some(r) = resampler.take() {
        send(session.push_audio(&r.finish().map_err(core)?).map_err(core)?.text);
    }
    send(session.finish().map_err(core)?.text);
    let seconds = session.metrics().audio_seconds;
    let _ = out.send(json!({
        "type": "transcript.text.done",
        "text": text,
        "usage": { "type": "duration", "seconds": seconds },
    }));
    Ok(())
}
