//! The speech routes' bounds, end to end on the real `infer serve` over loopback with raw HTTP:
//! an upload that decodes past `max_audio_seconds` (a 40 KB FLAC bomb of an hour) gets 413, a
//! busy recognizer answers 429 before an upload's body is read, and `request_timeout_secs`
//! ends a transcription or a synthesis that runs past it (504, or an error event in a stream).

#[path = "../../tests/tests/support/flac_bomb.rs"]
mod flac_bomb;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use infer_tests::fixture;
use infer_tests::serve::start_serve;

/// A running `infer serve` on a loopback port; killed on drop.
struct Server {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    /// A server for `server.toml` text (the models and limits), written into `dir`.
    fn start(dir: &Path, toml: &str) -> Server {
        let config = dir.join("server.toml");
        std::fs::write(&config, toml).unwrap();
        let started = start_serve(
            env!("CARGO_BIN_EXE_infer"),
            &["--config", config.to_str().unwrap()],
            &[],
            Duration::from_secs(120),
        );
        Server { child: started.child, addr: started.addr, log: started.log }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).unwrap();
        // Generous: a response that needs the whole body (the old behaviour) never comes.
        s.set_read_timeout(Some(Duration::from_secs(45))).unwrap();
        s
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const BOUNDARY: &str = "infer-test-boundary";

fn text_part(name: &str, value: &str) -> Vec<u8> {
    format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").into_bytes()
}

fn file_part_head(file_name: &str) -> Vec<u8> {
    format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{file_name}\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes()
}

/// A whole multipart upload: `fields` before the file, the file, `after` fields.
fn upload(fields: &[(&str, &str)], file_name: &str, file: &[u8], after: &[(&str, &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend(text_part(k, v));
    }
    body.extend(file_part_head(file_name));
    body.extend(file);
    body.extend(b"\r\n");
    for (k, v) in after {
        body.extend(text_part(k, v));
    }
    body.extend(format!("--{BOUNDARY}--\r\n").into_bytes());
    body
}

fn post_head(path: &str, content_type: &str, len: usize) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\n\
         Connection: close\r\n\r\n"
    )
    .into_bytes()
}

/// Everything the server sends until it closes (or the read timeout): status code and text.
fn read_response(stream: &mut TcpStream) -> (u16, String) {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if raw.is_empty() => panic!("no response: {e}"),
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("{text}"));
    (status, text)
}

fn post_upload(server: &Server, path: &str, body: &[u8]) -> (u16, String) {
    let mut s = server.connect();
    s.write_all(&post_head(path, &format!("multipart/form-data; boundary={BOUNDARY}"), body.len())).unwrap();
    // The server may answer before reading the whole body; a refused write is then fine.
    let _ = s.write_all(body);
    read_response(&mut s)
}

fn post_json(server: &Server, path: &str, body: &serde_json::Value) -> (u16, String) {
    let body = body.to_string();
    let mut s = server.connect();
    s.write_all(&post_head(path, "application/json", body.len())).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    read_response(&mut s)
}

fn recognizer() -> PathBuf {
    fixture("voxtral-realtime/hf")
}

/// An hour of FLAC silence (40 KB) to a server allowing 60 s of audio: 413 naming the limit,
/// and the server's memory stays far below the 691 MB the hour decodes to.
#[test]
fn an_upload_decoding_past_max_audio_seconds_gets_413() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!("max_audio_seconds = 60.0\n[[models]]\nname = \"asr\"\npath = {:?}\n", recognizer());
    let server = Server::start(dir.path(), &toml);
    let bomb = flac_bomb::silent_flac(3600, 48_000);
    let (status, text) =
        post_upload(&server, "/v1/audio/transcriptions", &upload(&[("model", "asr")], "bomb.flac", &bomb, &[]));
    assert_eq!(status, 413, "{text}");
    assert!(
        text.contains("\"param\":\"file\"") && text.contains("limit of 60 s") && text.contains("max_audio_seconds"),
        "{text}"
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    let peak_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(peak_kb < 600 << 10, "server peak RSS {} MB", peak_kb >> 10);
    // A real minute of it is transcribed (the limit is the decoded length, not the bytes).
    let short = flac_bomb::silent_flac(5, 16_000);
    let (status, text) =
        post_upload(&server, "/v1/audio/transcriptions", &upload(&[("model", "asr")], "short.flac", &short, &[]));
    assert_eq!(status, 200, "{text}");
    assert!(!server.log().contains("panicked"), "{}", server.log());
}

/// Starts an upload and stops after the file part's first bytes, the rest of a 20 MB body
/// unsent: the connection is left open.
fn stalled_upload(server: &Server, path: &str, fields: &[(&str, &str)]) -> TcpStream {
    let mut s = server.connect();
    let mut head = Vec::new();
    for (k, v) in fields {
        head.extend(text_part(k, v));
    }
    head.extend(file_part_head("speech.wav"));
    head.extend([0u8; 1024]);
    s.write_all(&post_head(path, &format!("multipart/form-data; boundary={BOUNDARY}"), 20 << 20)).unwrap();
    s.write_all(&head).unwrap();
    s
}

/// A stalled upload's answer, if one comes within 10 s without the rest of its body.
fn probe(server: &Server, path: &str, fields: &[(&str, &str)]) -> Option<(u16, String)> {
    let mut s = stalled_upload(server, path, fields);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, text))
}

/// Whether the server has answered or closed `stream` (a refusal, for a stalled upload).
fn was_answered(stream: &TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut byte = [0u8; 1];
    // A read that times out is a connection still waiting; data or end-of-stream is an answer.
    let answered = stream.peek(&mut byte).is_ok();
    stream.set_read_timeout(Some(Duration::from_secs(45))).unwrap();
    answered
}

/// One slot and no queue: while one upload is being received (its body stalled half-way), a
/// second one gets 429 at once, before its own body is sent — whether the model comes before
/// the file, in the query, or after the file (then any recognizer's admission is held). Before,
/// the whole body was read first: the second upload got no answer until it had sent 20 MB.
#[test]
fn a_busy_recognizer_refuses_uploads_before_reading_them() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!("parallel = 1\nqueue = 0\n[[models]]\nname = \"asr\"\npath = {:?}\n", recognizer());
    let server = Server::start(dir.path(), &toml);
    let mut first = stalled_upload(&server, "/v1/audio/transcriptions", &[("model", "asr")]);
    // Until the server has seen the first upload's file part, a probe may take the admission
    // itself (and then gets no answer: it is dropped, which frees it), and the first upload is
    // the one refused; it is then sent again. Before the fix no probe was ever answered: each
    // body was awaited whole.
    let start = std::time::Instant::now();
    let refused = loop {
        assert!(start.elapsed() < Duration::from_secs(120), "no upload was refused while another was received");
        if let Some((status, text)) = probe(&server, "/v1/audio/transcriptions", &[("model", "asr")]) {
            assert_eq!(status, 429, "{text}");
            break text;
        }
        if was_answered(&first) {
            first = stalled_upload(&server, "/v1/audio/transcriptions", &[("model", "asr")]);
        }
    };
    assert!(refused.contains("rate_limit_exceeded"), "{refused}");
    for (path, fields) in
        [("/v1/audio/transcriptions?model=asr", &[][..]), ("/v1/audio/transcriptions", &[("language", "en")][..])]
    {
        // On a loaded machine the stalled first upload may reach its body timeout meanwhile;
        // the probe then holds the admission itself: the first is sent again, as above.
        let start = std::time::Instant::now();
        let answer = loop {
            let answer = probe(&server, path, fields);
            if answer.is_some() || !was_answered(&first) || start.elapsed() > Duration::from_secs(120) {
                break answer;
            }
            first = stalled_upload(&server, "/v1/audio/transcriptions", &[("model", "asr")]);
        };
        assert!(matches!(&answer, Some((429, _))), "{path} {fields:?}: {answer:?}");
    }
    drop(first);
    // Once the first upload is gone, uploads are admitted again.
    let speech = std::fs::read(fixture("voxtral-realtime/speech_16k.wav")).unwrap();
    let mut ok = None;
    for _ in 0..200 {
        let (status, text) =
            post_upload(&server, "/v1/audio/transcriptions", &upload(&[], "speech.wav", &speech, &[("model", "asr")]));
        if status == 200 {
            ok = Some(text);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ok.is_some(), "the admission was not released: {}", server.log());
    assert!(!server.log().contains("panicked"), "{}", server.log());
}

/// `seconds` of noise at 16 kHz as a 16-bit WAV (32 KB a second).
fn noise_wav(seconds: u32) -> Vec<u8> {
    let rate = 16_000u32;
    let n = rate * seconds;
    let mut wav = Vec::with_capacity(44 + n as usize * 2);
    wav.extend(b"RIFF");
    wav.extend((36 + n * 2).to_le_bytes());
    wav.extend(b"WAVEfmt ");
    wav.extend(16u32.to_le_bytes());
    wav.extend([1, 0, 1, 0]);
    wav.extend(rate.to_le_bytes());
    wav.extend((rate * 2).to_le_bytes());
    wav.extend([2, 0, 16, 0]);
    wav.extend(b"data");
    wav.extend((n * 2).to_le_bytes());
    let mut x = 12345u32;
    for _ in 0..n {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        wav.extend(((x >> 16) as i16 / 4).to_le_bytes());
    }
    wav
}

/// `request_timeout_secs = 1`: a long transcription (whole or streamed) and a long synthesis
/// (whole or SSE) end with the timeout's error, naming the limit.
#[test]
fn speech_requests_past_request_timeout_end_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "request_timeout_secs = 1\nmax_upload_bytes = 134217728\nmax_audio_seconds = 4000\n\
         [[models]]\nname = \"asr\"\npath = {:?}\n[[models]]\nname = \"tts\"\npath = {:?}\n",
        recognizer(),
        fixture("qwen3-tts/small")
    );
    let server = Server::start(dir.path(), &toml);
    // How long the tiny recognizer takes depends on the machine and its load (200 s of noise
    // took under a second once): the audio grows until a whole transcription runs past 1 s.
    let mut timed_out = None;
    let mut wav = Vec::new();
    for seconds in [200, 800, 3200] {
        wav = noise_wav(seconds);
        let (status, text) =
            post_upload(&server, "/v1/audio/transcriptions", &upload(&[("model", "asr")], "noise.wav", &wav, &[]));
        if status == 504 {
            timed_out = Some(text);
            break;
        }
        assert_eq!(status, 200, "{seconds} s of audio: {text}");
    }
    let text = timed_out.expect("even 3200 s of audio transcribed whole within the 1 s limit");
    assert!(text.contains("request_timeout") && text.contains("limit of 1 s"), "{text}");
    let mut streamed = None;
    for _ in 0..600 {
        let (status, text) = post_upload(
            &server,
            "/v1/audio/transcriptions",
            &upload(&[("model", "asr"), ("stream", "true")], "noise.wav", &wav, &[]),
        );
        // The whole transcription above may still hold the one slot (it cannot be interrupted).
        if status != 429 {
            streamed = Some((status, text));
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let (status, text) = streamed.unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"code\":\"request_timeout\"") && !text.contains("transcript.text.done"), "{text}");

    // A synthesis of the random fixture ends when it samples its end of speech, which for one
    // seed came within the second in a loaded run: seeds are tried until one runs past it.
    let speech = |stream: Option<&str>, seed: u64| {
        let mut req = serde_json::json!({
            "model": "tts", "input": "A sentence that would take far longer than a second to say.",
            "response_format": "wav", "max_frames": 100000, "seed": seed,
        });
        if let Some(s) = stream {
            req["stream_format"] = s.into();
        }
        post_json(&server, "/v1/audio/speech", &req)
    };
    let whole = (1..=16).find_map(|seed| {
        let (status, text) = speech(None, seed);
        (status != 200).then_some((status, text))
    });
    let (status, text) = whole.expect("every seed synthesized whole within the 1 s limit");
    assert_eq!(status, 504, "{text}");
    assert!(text.contains("request_timeout"), "{text}");
    let streamed = (1..=16).find_map(|seed| {
        let (status, text) = speech(Some("sse"), seed);
        assert_eq!(status, 200, "{text}");
        (!text.contains("speech.audio.done")).then_some(text)
    });
    let text = streamed.expect("every seed's stream finished within the 1 s limit");
    assert!(text.contains("\"code\":\"request_timeout\""), "{text}");
    assert!(!server.log().contains("panicked"), "{}", server.log());
}
