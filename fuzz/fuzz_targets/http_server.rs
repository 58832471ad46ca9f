//! The whole HTTP server (`infer_server::serve_with`: router, API-key and Host checks, body
//! limits, JSON and multipart extractors, every handler, the WebSocket upgrade and its frames)
//! over a loopback socket, serving the tiny Qwen3 LLM fixture (`llm`) and the Voxtral Realtime
//! fixture (`asr`). Input: first byte picks the server (even: no API key; odd: key `k`), the rest
//! is written to one connection as is (requests, pipelined requests, a WebSocket upgrade and
//! the frames after it), which is then half-closed. The server must answer with HTTP (or close),
//! never with a 5xx other than 503/504, never hold the connection, and never panic (libFuzzer
//! aborts on a panic in any thread).
#![no_main]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use infer_server::{ModelSpec, ServerConfig};
use libfuzzer_sys::fuzz_target;

/// Longer than every timeout the servers run with: a connection still open past it is held.
const READ_TIMEOUT: Duration = Duration::from_secs(25);

fn start(api_key: Option<&str>) -> u16 {
    // A free port: bound, read, released; the server binds it a moment later.
    let port = TcpListener::bind("127.0.0.1:0").expect("a loopback port").local_addr().expect("its address").port();
    let spec =
        |name: &str, rel: &str| ModelSpec { name: Some(name.into()), ..ModelSpec::from_path(infer_fuzz::fixture(rel)) };
    let config = ServerConfig {
        port,
        api_key: api_key.map(String::from),
        parallel: 2,
        queue: 4,
        default_max_tokens: 4,
        max_tokens_limit: 8,
        max_body_bytes: 64 << 10,
        max_upload_bytes: 256 << 10,
        max_audio_seconds: 3.0,
        request_timeout_secs: 10,
        header_timeout_secs: 2,
        body_timeout_secs: 2,
        idle_timeout_secs: 2,
        ws_idle_timeout_secs: 2,
        ws_max_message_bytes: 64 << 10,
        cors_origins: vec!["http://allowed.example".into()],
        allowed_hosts: vec!["allowed.example".into()],
        prepare_tasks: 1,
        models: vec![spec("llm", "qwen3/gqa"), spec("asr", "voxtral-realtime/hf")],
        ..Default::default()
    };
    std::thread::spawn(move || {
        let registry = infer_core::Registry::builtin().expect("the built-in plugins");
        infer_server::serve_with(&registry, config, || {}).expect("the fuzzed server starts");
    });
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < Duration::from_secs(300), "the server did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
    port
}

fn ports() -> &'static [u16; 2] {
    static PORTS: OnceLock<[u16; 2]> = OnceLock::new();
    PORTS.get_or_init(|| [start(None), start(Some("k"))])
}

fn exchange(port: u16, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("the server accepts connections");
    s.set_read_timeout(Some(READ_TIMEOUT)).expect("read timeout");
    s.set_write_timeout(Some(READ_TIMEOUT)).expect("write timeout");
    // The server may answer (413, 400) and close before reading it all: a failed write is fine.
    let _ = s.write_all(request);
    let _ = s.shutdown(Shutdown::Write);
    let mut out = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!("the server held the connection {READ_TIMEOUT:?} after the request ended")
            }
            // A reset after an early answer.
            Err(_) => break,
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, request)) = data.split_first() else { return };
    let port = ports()[(pick & 1) as usize];
    let response = exchange(port, request);
    // Every response on the connection (pipelined requests get one each).
    let text = String::from_utf8_lossy(&response);
    let starts = text.match_indices("HTTP/1.1 ").map(|(i, _)| i).filter(|&i| i == 0 || text[..i].ends_with('\n'));
    for i in starts {
        let status: u16 = text[i + 9..].get(..3).and_then(|s| s.parse().ok()).unwrap_or(0);
        if status >= 500 && status != 503 && status != 504 {
            panic!("status {status} for a client's request:\n{}", &text[i..text.len().min(i + 2000)]);
        }
    }
});
