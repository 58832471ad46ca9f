//! `infer serve` against hostile or careless network clients, over raw sockets: slow headers,
//! slow bodies and idle keep-alive connections are cut off; the live WebSocket refuses
//! over-limit messages and silent sockets (and frees its slot); API keys compare whole, travel
//! as a WebSocket subprotocol and guard `/metrics` when asked; CORS only when configured; and
//! without a key, only loopback or listed `Host` names are served (DNS rebinding).
//!
//! Every server serves the Voxtral Realtime fixture (it loads in a moment) as `asr`.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use infer_core::audio_io::read_audio;
use infer_tests::fixture;
use infer_tests::serve::start_serve;
use serde_json::Value;
use tungstenite::client::IntoClientRequest;
use tungstenite::Message;

const KEY: &str = "test-key-123";
/// As long as KEY, one byte different: a comparison that stops at the length would pass it.
const WRONG_KEY: &str = "test-key-124";
/// How long a test waits for the server to act on a deadline of a few seconds: generous, the
/// machine is shared.
const LIVENESS: Duration = Duration::from_secs(60);

/// A running `infer serve`; killed on drop.
struct Server {
    child: Child,
    /// `127.0.0.1:PORT`, whatever address it listens on.
    addr: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    /// Serves the fixture with `toml` (top-level keys) and the extra command-line `args`.
    fn start(dir: &Path, toml: &str, args: &[&str]) -> Server {
        let cfg = dir.join("server.toml");
        let models = format!("[[models]]\nname = \"asr\"\npath = {:?}\n", fixture("voxtral-realtime/hf"));
        std::fs::write(&cfg, format!("{toml}\n{models}")).unwrap();
        let mut serve_args = vec!["--config", cfg.to_str().unwrap()];
        serve_args.extend_from_slice(args);
        let started = start_serve(env!("CARGO_BIN_EXE_infer"), &serve_args, &[], Duration::from_secs(120));
        // Whatever address it listens on, loopback reaches it.
        let port = started.addr.rsplit(':').next().unwrap().to_string();
        Server { child: started.child, addr: format!("127.0.0.1:{port}"), log: started.log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(LIVENESS)).unwrap();
        s
    }

    /// One request on its own connection (`Connection: close`), `head` holding the request
    /// line and any headers but Host unless it names one; the status and the whole response.
    fn request(&self, head: &str, body: &str) -> (u16, String) {
        let mut s = self.connect();
        let host = if head.to_ascii_lowercase().contains("\r\nhost:") {
            String::new()
        } else {
            format!("Host: {}\r\n", self.addr)
        };
        let head = head.trim_end();
        write!(s, "{head}\r\n{host}Content-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        (status(&out), out)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status(response: &str) -> u16 {
    response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status: {response:?}"))
}

/// The response's header `name` (lowercase), if any.
fn header<'a>(response: &'a str, name: &str) -> Option<&'a str> {
    let head = response.split("\r\n\r\n").next().unwrap();
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The JSON body of a response.
fn json_body(response: &str) -> Value {
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {response:?}"))
}

/// Waits for the server to close `s`: reads (discarding) until end of file or a reset; fails if
/// it stays open for LIVENESS.
fn assert_closed(mut s: TcpStream, what: &str) -> String {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return String::from_utf8_lossy(&got).into_owned(),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("{what}: the connection was still open after {:?}", start.elapsed())
            }
            Err(_) => return String::from_utf8_lossy(&got).into_owned(), // reset: closed
        }
    }
}

#[test]
fn slow_headers_slow_bodies_and_idle_connections_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        Server::start(dir.path(), "header_timeout_secs = 2\nbody_timeout_secs = 2\nidle_timeout_secs = 3", &[]);

    // Slowloris: half the headers, then nothing.
    let mut slow = server.connect();
    write!(slow, "GET /health HTTP/1.1\r\nHost: {}\r\nX-Slow: ", server.addr).unwrap();
    // Meanwhile a normal request is served.
    let (code, models) = server.request("GET /v1/models HTTP/1.1", "");
    assert_eq!(code, 200, "{models}");
    assert_closed(slow, "half-sent headers");

    // A body that stops: 408, and the connection closed.
    let mut s = server.connect();
    let head =
        format!("POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n", server.addr);
    write!(s, "{head}Content-Length: 100\r\n\r\n{{\"model\":").unwrap();
    let response = assert_closed(s, "a stalled body");
    assert_eq!(status(&response), 408, "{response}");
    assert_eq!(json_body(&response)["error"]["code"], "request_timeout", "{response}");

    // A body dripped a byte every half second (a clock restarted per chunk would never fire):
    // the deadline counts from the headers.
    let mut s = server.connect();
    write!(s, "{head}Content-Length: 1000\r\n\r\n").unwrap();
    let mut drip = s.try_clone().unwrap();
    let dripper = std::thread::spawn(move || {
        for _ in 0..120 {
            if drip.write_all(b" ").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let response = assert_closed(s, "a dripped body");
    assert_eq!(status(&response), 408, "{response}");
    dripper.join().unwrap();

    // Keep-alive: a request answered, then silence; the server closes the idle connection.
    let mut s = server.connect();
    write!(s, "GET /health HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr).unwrap();
    let mut first = [0u8; 12];
    s.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&first));
    assert_closed(s, "an idle keep-alive connection");

    // Still serving.
    let (code, models) = server.request("GET /v1/models HTTP/1.1", "");
    assert_eq!(code, 200, "{models}");
    assert!(!server.log().contains("panicked"), "{}", server.log());
}

/// The Voxtral Realtime fixture's transcript at the default delay (as cli/tests/serve.rs).
fn golden_transcript() -> String {
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("voxtral-realtime/goldens.json")).unwrap()).unwrap();
    let case = g["cases"].as_array().unwrap().iter().find(|c| c["delay_ms"] == 480).expect("a 480 ms case");
    case["text"].as_str().unwrap().to_string()
}

/// The fixture's speech as PCM16 chunks of 3001 samples.
fn speech_chunks() -> Vec<Vec<u8>> {
    let audio = read_audio(fixture("voxtral-realtime/speech_16k.wav")).unwrap().audio;
    let pcm16: Vec<u8> = audio.samples.iter().flat_map(|&x| ((x * 32768.0).round() as i16).to_le_bytes()).collect();
    pcm16.chunks(2 * 3001).map(<[u8]>::to_vec).collect()
}

type Socket = tungstenite::WebSocket<TcpStream>;

/// Opens the live socket, offering `protocols` (comma-separated) if any.
fn open_live(
    server: &Server,
    protocols: Option<&str>,
) -> Result<(Socket, tungstenite::handshake::client::Response), String> {
    let url = format!("ws://{}/v1/audio/transcriptions/live?model=asr", server.addr);
    let mut req = url.into_client_request().unwrap();
    if let Some(p) = protocols {
        req.headers_mut().insert("Sec-WebSocket-Protocol", p.parse().unwrap());
    }
    match tungstenite::client(req, server.connect()) {
        Ok(pair) => Ok(pair),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => {
            Err(format!("HTTP {}", r.status().as_u16()))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Streams `chunks` and `end`; the concatenated deltas, checked equal to the done event's text,
/// once the server closed the socket.
fn transcribe_live(ws: &mut Socket, chunks: Vec<Vec<u8>>) -> String {
    for c in chunks {
        ws.send(Message::Binary(c.into())).unwrap();
    }
    ws.send(Message::Text(r#"{"type":"end"}"#.into())).unwrap();
    let mut deltas = String::new();
    loop {
        match ws.read().expect("a message before the done event") {
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                match v["type"].as_str() {
                    Some("transcript.text.delta") => deltas += v["delta"].as_str().unwrap(),
                    Some("transcript.text.done") => {
                        assert_eq!(v["text"], deltas.as_str(), "{v}");
                        // The server closes once the session let go of its slot.
                        while !matches!(ws.read(), Ok(Message::Close(_)) | Err(_)) {}
                        return deltas;
                    }
                    _ => panic!("unexpected event {v}"),
                }
            }
            Message::Close(_) => panic!("closed before the done event"),
            _ => {}
        }
    }
}

/// Reads until the server's error event; its message. Then the socket must close.
fn expect_error_then_close(mut ws: Socket, what: &str) -> String {
    let message = loop {
        match ws.read() {
            Ok(Message::Text(t)) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                assert_eq!(v["type"], "error", "{what}: {v}");
                break v["error"]["message"].as_str().unwrap().to_string();
            }
            Ok(Message::Close(_)) => panic!("{what}: closed without an error event"),
            Ok(_) => {}
            Err(e) => panic!("{what}: no error event: {e}"),
        }
    };
    match ws.read() {
        Ok(Message::Close(_)) | Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::Protocol(_)) => {}
        Err(tungstenite::Error::Io(e)) if !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        Ok(m) => panic!("{what}: a message after the error: {m:?}"),
        Err(e) => panic!("{what}: not closed after the error: {e}"),
    }
    message
}

/// One recognition slot and no queue: a session that kept its slot would refuse the next.
#[test]
fn live_socket_refuses_big_messages_and_silence_and_frees_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        "parallel = 1\nqueue = 0\nws_idle_timeout_secs = 2\nws_max_message_bytes = 65536",
        &[],
    );
    let golden = golden_transcript();
    let (mut ws, _) = open_live(&server, None).unwrap();
    assert_eq!(transcribe_live(&mut ws, speech_chunks()), golden);
    drop(ws);

    // A message over the limit (axum's default would take 64 MiB).
    let (mut ws, _) = open_live(&server, None).unwrap();
    ws.send(Message::Binary(vec![0u8; 70_000].into())).unwrap();
    let message = expect_error_then_close(ws, "an over-limit message");
    assert!(message.contains("could not be read"), "{message}");

    // A silent socket: closed with an error after the idle deadline.
    let (ws, _) = open_live(&server, None).unwrap();
    let message = expect_error_then_close(ws, "a silent socket");
    assert!(message.contains("ws_idle_timeout_secs"), "{message}");

    // Its slot is free again: a whole session runs.
    let (mut ws, _) = open_live(&server, None).unwrap();
    assert_eq!(transcribe_live(&mut ws, speech_chunks()), golden);
    assert!(!server.log().contains("panicked"), "{}", server.log());
}

#[test]
fn keys_compare_whole_travel_as_a_subprotocol_and_guard_metrics_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "metrics_require_key = true", &["--api-key", KEY]);
    let bearer = |key: &str| format!("GET /v1/models HTTP/1.1\r\nAuthorization: Bearer {key}");
    let (code, r) = server.request(&bearer(WRONG_KEY), "");
    assert_eq!((code, json_body(&r)["error"]["code"].as_str()), (401, Some("invalid_api_key")), "{r}");
    assert_eq!(server.request(&bearer(KEY), "").0, 200);
    // A key makes every Host acceptable.
    let (code, r) = server.request(&format!("{}\r\nHost: evil.example", bearer(KEY)), "");
    assert_eq!(code, 200, "{r}");

    let metrics = |auth: &str| server.request(&format!("GET /metrics HTTP/1.1{auth}"), "").0;
    assert_eq!(metrics(""), 401);
    assert_eq!(metrics(&format!("\r\nAuthorization: Bearer {WRONG_KEY}")), 401);
    assert_eq!(metrics(&format!("\r\nAuthorization: Bearer {KEY}")), 200);

    // The WebSocket: the key as subprotocol `bearer.<key>` beside `infer`, which is selected.
    assert_eq!(open_live(&server, None).err().as_deref(), Some("HTTP 401"));
    let wrong = format!("infer, bearer.{WRONG_KEY}");
    assert_eq!(open_live(&server, Some(&wrong)).err().as_deref(), Some("HTTP 401"));
    let (mut ws, response) = open_live(&server, Some(&format!("infer, bearer.{KEY}"))).unwrap();
    let selected = response.headers().get("sec-websocket-protocol").map(|v| v.to_str().unwrap().to_string());
    assert_eq!(selected.as_deref(), Some("infer"));
    assert_eq!(transcribe_live(&mut ws, speech_chunks()), golden_transcript());
}

#[test]
fn without_a_key_metrics_are_open_and_only_loopback_or_listed_hosts_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "allowed_hosts = [\"box.lan\"]", &["--host", "0.0.0.0"]);
    let log = server.log();
    let warning = log.lines().find(|l| l.starts_with("warning: ")).unwrap_or_else(|| panic!("no warning: {log}"));
    assert!(warning.contains("0.0.0.0") && warning.contains("without an API key"), "{warning}");
    assert_eq!(server.request("GET /metrics HTTP/1.1", "").0, 200);

    let host = |name: &str| server.request(&format!("GET /v1/models HTTP/1.1\r\nHost: {name}"), "");
    let (code, r) = host("evil.example");
    assert_eq!(code, 403, "{r}");
    let e = json_body(&r);
    assert_eq!(e["error"]["code"], "host_not_allowed", "{r}");
    assert!(e["error"]["message"].as_str().unwrap().contains("evil.example"), "{r}");
    assert_eq!(host("evil.example:8080").0, 403);
    for ok in ["localhost", "localhost:8080", "127.0.0.1:1", "[::1]:8080", "box.lan", "BOX.LAN:8080"] {
        assert_eq!(host(ok).0, 200, "{ok}");
    }

    // No CORS unless configured: no header, and a preflight is not answered as one.
    let (_, r) = server.request("GET /v1/models HTTP/1.1\r\nOrigin: https://app.example", "");
    assert_eq!(header(&r, "access-control-allow-origin"), None, "{r}");
    let preflight = "OPTIONS /v1/models HTTP/1.1\r\nOrigin: https://app.example\r\nAccess-Control-Request-Method: GET";
    let (_, r) = server.request(preflight, "");
    assert_eq!(header(&r, "access-control-allow-origin"), None, "{r}");
}

/// `--cors-origin`: preflights from that origin answered, others not. (A loopback bind does not
/// warn about the missing key either.)
#[test]
fn cors_answers_preflights_for_configured_origins_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "", &["--api-key", KEY, "--cors-origin", "https://app.example"]);
    assert!(!server.log().contains("warning: "), "a loopback bind does not warn: {}", server.log());
    let preflight = |origin: &str| {
        let head = format!(
            "OPTIONS /v1/chat/completions HTTP/1.1\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: POST\r\n\
             Access-Control-Request-Headers: authorization, content-type"
        );
        server.request(&head, "")
    };
    let (code, r) = preflight("https://app.example");
    assert!((200..300).contains(&code), "{r}");
    assert_eq!(header(&r, "access-control-allow-origin"), Some("https://app.example"), "{r}");
    let methods = header(&r, "access-control-allow-methods").unwrap_or_default().to_ascii_uppercase();
    assert!(methods.contains("POST"), "{r}");
    let allowed = header(&r, "access-control-allow-headers").unwrap_or_default().to_ascii_lowercase();
    assert!(allowed.contains("authorization") && allowed.contains("content-type"), "{r}");
    let (_, r) = preflight("https://other.example");
    assert_eq!(header(&r, "access-control-allow-origin"), None, "{r}");

    // The real request carries the header too, refusals included (the page can read them).
    let (code, r) = server.request("GET /v1/models HTTP/1.1\r\nOrigin: https://app.example", "");
    assert_eq!(code, 401, "{r}");
    assert_eq!(header(&r, "access-control-allow-origin"), Some("https://app.example"), "{r}");
}

/// An oversized body is answered 413 before it has arrived; the client must be able to read that
/// answer. Closing a socket with its input unread makes the kernel reset it, which destroyed the
/// 413 in about one try of twenty in the fault test: the server now lingers, reading and dropping
/// what the client still sends before it closes.
#[test]
fn an_oversized_body_gets_its_413_not_a_reset() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "max_body_bytes = 100000", &[]);
    let body = format!("{{\"model\": \"{}\"}}", "x".repeat(4 << 20));
    for i in 0..20 {
        let mut s = server.connect();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            server.addr,
            body.len()
        );
        let sent = s.write_all(head.as_bytes()).and_then(|()| s.write_all(body.as_bytes()));
        let mut out = String::new();
        let read = s.read_to_string(&mut out);
        assert!(
            sent.is_ok() && read.is_ok() && status(&out) == 413,
            "try {i}: sending {sent:?}, reading {read:?}: {out:?}"
        );
    }
}
