//! `infer serve` end to end: the real binary on a loopback port, driven by the official `openai`
//! Python client (pinned, installed by tools/serve/setup_openai_venv.sh): chat and completions
//! (text equal to `infer run` greedy on the same model), streaming with usage, speech in every
//! format, transcription (upload, SSE and the live WebSocket) equal to the Voxtral Realtime
//! fixture's golden, the models list, API keys, OpenAI-shaped errors, a SIGTERM drain, and a
//! load test (concurrent streams, some cancelled) against solo greedy output.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use infer_core::audio_io::read_audio;
use infer_tests::cli::{stderr, Infer};
use infer_tests::serve::{client_python, start_serve};
use infer_tests::{fixture, real_model, repo_root};
use serde_json::Value;

const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";
const QWEN: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
const KEY: &str = "test-key-123";
/// The server's count of generations cancelled by a client disconnect (server/src/metrics.rs).
const CANCELLED: &str = "infer_cancelled_requests_total{";

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_infer")
}

/// A running `infer serve`; killed on drop (tests that stop it with SIGTERM wait for it to exit).
struct Server {
    child: Child,
    base: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let started = start_serve(exe(), args, &[], Duration::from_secs(120));
        Server { child: started.child, base: format!("http://{}/v1", started.addr), log: started.log }
    }

    fn client(&self, key: &str, case: &str, args: &[&str]) -> Value {
        let o = Command::new(client_python())
            .arg(repo_root().join("cli/tests/serve_client.py"))
            .args([&self.base, key, case])
            .args(args)
            .output()
            .expect("run the python client");
        assert!(o.status.success(), "client {case} failed: {}\nserver log:\n{}", stderr(&o), self.log());
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("client {case} printed no JSON: {e}"))
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The exit status once the server stopped by itself (after a SIGTERM someone sent it).
    fn wait_exit(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(start.elapsed() < Duration::from_secs(120), "the server did not exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One server for gemma, qwen and the Qwen3-TTS fixture, named `gemma`, `qwen` and `tts`.
fn config(dir: &Path) -> PathBuf {
    let path = dir.join("server.toml");
    let toml = format!(
        "parallel = 4\n\
         [[models]]\nname = \"gemma\"\npath = {:?}\n\
         [[models]]\nname = \"qwen\"\npath = {:?}\n\
         [[models]]\nname = \"tts\"\npath = {:?}\n",
        real_model(GEMMA),
        real_model(QWEN),
        fixture("qwen3-tts/small"),
    );
    std::fs::write(&path, toml).unwrap();
    path
}

/// `infer run` greedy text: the reference for the server's answers.
fn run_text(model: &str, prompt: &str, max_tokens: usize, chat: bool) -> String {
    let n = max_tokens.to_string();
    let path = real_model(model);
    let mut args = vec!["run", "--model", path.to_str().unwrap(), "-p", prompt, "--max-tokens", &n, "--json"];
    // The server's requests here are greedy; `infer run` samples unless told otherwise.
    args.extend(["--temperature", "0"]);
    if chat {
        args.push("--chat");
    }
    let o = Infer::new(exe()).run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["text"].as_str().unwrap().to_string()
}

#[test]
fn openai_client_chat_completions_speech_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    let log = server.log();
    for name in ["gemma", "qwen", "tts"] {
        assert!(log.contains(&format!("loaded {name}: ")), "no progress line for {name}: {log}");
    }

    let models = server.client("none", "models", &[]);
    assert_eq!(models["ids"], serde_json::json!(["gemma", "qwen", "tts"]));

    let prompt = "Write a C function that adds two integers.";
    let expected = run_text(QWEN, prompt, 24, true);
    let chat = server.client("none", "chat", &["qwen", prompt, "24"]);
    assert_eq!(chat["text"], expected, "{chat}");
    assert_eq!(chat["role"], "assistant");
    assert_eq!(chat["object"], "chat.completion");
    assert_eq!(chat["usage"]["completion_tokens"], 24);
    assert_eq!(chat["finish_reason"], "length");
    let streamed = server.client("none", "chat-stream", &["qwen", prompt, "24"]);
    assert_eq!(streamed["text"], expected, "{streamed}");
    assert_eq!(streamed["roles"], serde_json::json!(["assistant"]));
    assert_eq!(streamed["usage"], chat["usage"], "include_usage: {streamed}");
    assert_eq!(streamed["finish_reason"], "length");

    let prompt = "The three primary colors are";
    let expected = run_text(GEMMA, prompt, 20, false);
    for mode in ["whole", "stream"] {
        let c = server.client("none", "completion", &["gemma", prompt, "20", mode]);
        assert_eq!(c["text"], expected, "{mode}: {c}");
    }

    let speech = server.client("none", "speech", &["tts", dir.path().to_str().unwrap()]);
    let wav = read_audio(dir.path().join("speech.wav")).unwrap().audio;
    assert_eq!(wav.sample_rate, 24000);
    assert!(!wav.samples.is_empty() && wav.samples.len() <= 12 * 1920, "{} samples", wav.samples.len());
    let pcm = std::fs::metadata(dir.path().join("speech.pcm")).unwrap().len() as usize;
    assert_eq!(pcm, wav.samples.len() * 2, "pcm is the wav's samples as s16le");
    for ext in ["flac", "mp3", "opus"] {
        let audio = read_audio(dir.path().join(format!("speech.{ext}"))).unwrap().audio;
        // Lossy codecs pad to their frame sizes.
        assert!((audio.duration_secs() - wav.duration_secs()).abs() < 0.08, "{ext}: {} s", audio.duration_secs());
    }
    let streamed = read_audio(dir.path().join("streamed.wav")).unwrap().audio;
    assert_eq!(streamed.samples, wav.samples, "streamed wav equals the whole one: {speech}");

    let errors = server.client("none", "errors", &["qwen", "tts"]);
    let expect = |case: &str, status: u64, param: Option<&str>| {
        let e = &errors[case];
        assert_eq!(e["status"], status, "{case}: {e}");
        if let Some(p) = param {
            assert_eq!(e["param"], p, "{case}: {e}");
        }
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{case}: {e}");
    };
    expect("unknown_model", 404, Some("model"));
    expect("penalty", 400, Some("presence_penalty"));
    expect("temperature", 400, Some("temperature"));
    expect("wrong_kind", 400, Some("model"));
    expect("aac", 400, Some("response_format"));
    expect("voice", 400, Some("voice"));
    expect("chat_on_tts", 400, Some("model"));
    expect("transcription", 400, Some("model"));
    expect("too_long", 400, None);
    assert!(!server.log().contains("panicked"), "{}", server.log());
}

#[test]
fn api_key_is_required_when_set() {
    let model = real_model(GEMMA);
    let server = Server::start(&["--model", model.to_str().unwrap(), "--api-key", KEY]);
    let auth = server.client(KEY, "auth", &[]);
    assert_eq!(auth["wrong"]["status"], 401, "{auth}");
    assert_eq!(auth["right"], serde_json::json!(["gemma-3-270m-q4_k_m"]));
}

/// GET of a loopback URL with plain std (the metrics page).
fn http_get(base: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://").trim_end_matches("/v1");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The value of the metric line that starts with `prefix`; a page without one fails the test
/// (a renamed or never-created metric must not read as 0).
fn metric(page: &str, prefix: &str) -> f64 {
    let line = page
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no metric line starts with {prefix:?} on the metrics page:\n{page}"));
    line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no value in {line:?}"))
}

/// The metrics page once no slot is taken and nothing waits for one.
fn idle_metrics(server: &Server) -> String {
    let start = Instant::now();
    loop {
        let page = http_get(&server.base, "/metrics");
        if metric(&page, "infer_active_slots{") == 0.0 && metric(&page, "infer_queue_depth{") == 0.0 {
            return page;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "slots still held after the load:\n{page}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The client sends SIGTERM the moment the first token of its stream arrives: token chunks came
/// both before and after the signal (it landed mid-generation), the stream still ends whole, and
/// the server exits cleanly afterwards.
#[test]
fn sigterm_drains_in_flight_requests() {
    let model = real_model(GEMMA);
    let mut server = Server::start(&["--model", model.to_str().unwrap()]);
    let prompt = "A short story about a lighthouse keeper:";
    let pid = server.child.id().to_string();
    let v = server.client("none", "completion-sigterm", &["gemma-3-270m-q4_k_m", prompt, "48", &pid]);
    let status = server.wait_exit();
    let tokens = |after: bool| {
        v["chunks"].as_array().unwrap().iter().filter(|c| c["after_signal"] == after && c["text"] != "").count()
    };
    let (before, after) = (tokens(false), tokens(true));
    assert!(
        before >= 1 && after >= 1,
        "the signal did not land mid-stream: {before} token chunk(s) before it, {after} after: {v}"
    );
    assert_eq!(v["finish_reason"], "length", "the in-flight stream was completed: {v}");
    assert_eq!(v["text"], run_text(GEMMA, prompt, 48, false));
    assert!(status.success(), "exit status {status}: {}", server.log());
    assert!(server.log().contains("shutting down"), "{}", server.log());
}

/// The Voxtral Realtime fixture's transcript at the default delay (tests/tests/voxtral_realtime.rs
/// checks it against transformers and mistral-common).
fn golden_transcript() -> String {
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("voxtral-realtime/goldens.json")).unwrap()).unwrap();
    let case = g["cases"].as_array().unwrap().iter().find(|c| c["delay_ms"] == 480).expect("a 480 ms case");
    case["text"].as_str().unwrap().to_string()
}

/// Streams `samples` over the live endpoint in odd-sized chunks; the concatenated deltas and
/// the done event's text.
fn live_transcript(base: &str, query: &str, chunks: Vec<Vec<u8>>) -> (String, String) {
    use tungstenite::Message;
    let addr = base.trim_start_matches("http://").trim_end_matches("/v1");
    let stream = std::net::TcpStream::connect(addr).unwrap();
    let url = format!("ws://{addr}/v1/audio/transcriptions/live?{query}");
    let (mut ws, _) = tungstenite::client(url.as_str(), stream).expect("websocket handshake");
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
                    Some("transcript.text.done") => return (deltas, v["text"].as_str().unwrap().to_string()),
                    _ => panic!("unexpected event {v}"),
                }
            }
            Message::Close(_) => panic!("closed before the done event"),
            _ => {}
        }
    }
}

#[test]
fn transcription_upload_stream_and_live_socket() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("server.toml");
    // The 48 kHz stereo recording (633 kB) is over this limit, the 16 kHz one (106 kB) under it.
    let toml =
        format!("max_upload_bytes = 300000\n[[models]]\nname = \"asr\"\npath = {:?}\n", fixture("voxtral-realtime/hf"));
    std::fs::write(&cfg, toml).unwrap();
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    assert!(server.log().contains("loaded asr: speech recognition"), "{}", server.log());
    let golden = golden_transcript();
    let wav = fixture("voxtral-realtime/speech_16k.wav");
    let big = fixture("voxtral-realtime/speech_48k_stereo.wav");
    let v = server.client("none", "transcribe", &["asr", wav.to_str().unwrap(), big.to_str().unwrap()]);
    assert_eq!(v["json"], golden, "{v}");
    assert_eq!(v["text"], golden, "{v}");
    assert_eq!(v["verbose"]["text"], golden, "{v}");
    assert_eq!(v["verbose"]["task"], "transcribe");
    let audio = read_audio(&wav).unwrap().audio;
    assert!((v["verbose"]["duration"].as_f64().unwrap() - audio.duration_secs()).abs() < 1e-6, "{v}");
    assert_eq!(v["stream"]["deltas"], golden, "{v}");
    assert_eq!(v["stream"]["done"], golden, "{v}");
    let errors = &v["errors"];
    assert_eq!(errors["not_audio"]["status"], 400, "{errors}");
    assert_eq!(errors["not_audio"]["param"], "file", "{errors}");
    assert_eq!(errors["too_large"]["status"], 413, "{errors}");
    assert_eq!(errors["srt"]["status"], 400, "{errors}");
    assert_eq!(errors["srt"]["param"], "response_format", "{errors}");
    assert_eq!(errors["missing_file"]["status"], 400, "{errors}");
    assert_eq!(errors["missing_file"]["param"], "file", "{errors}");

    // The live socket, PCM16 and f32 chunks: the file's samples are 16-bit, so both carry them
    // exactly.
    let pcm16: Vec<u8> = audio.samples.iter().flat_map(|&x| ((x * 32768.0).round() as i16).to_le_bytes()).collect();
    let (deltas, done) =
        live_transcript(&server.base, "model=asr", pcm16.chunks(2 * 3001).map(<[u8]>::to_vec).collect());
    assert_eq!((deltas.as_str(), done.as_str()), (golden.as_str(), golden.as_str()), "pcm16");
    let f32s: Vec<u8> = audio.samples.iter().flat_map(|x| x.to_le_bytes()).collect();
    let (deltas, _) =
        live_transcript(&server.base, "model=asr&encoding=f32", f32s.chunks(4 * 1999).map(<[u8]>::to_vec).collect());
    assert_eq!(deltas, golden, "f32");
    assert!(!server.log().contains("panicked"), "{}", server.log());
}

/// Resident set size of a process, in bytes (Linux).
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kb * 1024
}

/// How many streams a `load` round closed before they finished.
fn dropped_streams(load: &Value) -> usize {
    load["results"].as_array().unwrap().iter().filter(|r| r["cancelled"] == true).count()
}

/// 64 concurrent streaming chats on 8 slots with every fourth (a long generation) dropped after a
/// few chunks: every completed stream equals that prompt's greedy output alone, nothing is lost,
/// the server counts each dropped stream as cancelled and frees its slot, and memory settles back
/// near where one warm-up round left it.
#[test]
fn load_concurrent_streams_with_cancellations() {
    const N: usize = 64;
    const MAX_TOKENS: &str = "12";
    let model = real_model(GEMMA);
    let server = Server::start(&["--model", model.to_str().unwrap(), "--parallel", "8", "--queue", "64"]);
    let name = "gemma-3-270m-q4_k_m";
    // A warm-up round of the same load fills the allocator's pools and per-thread arenas (a
    // round of 8 left the 64-stream round 65 MB above it once, with nothing leaked); its RSS is
    // the baseline, and a leak shows as growth over the second round.
    let warm = server.client("none", "load", &[name, &N.to_string(), MAX_TOKENS]);
    assert_eq!(warm["results"].as_array().unwrap().len(), N, "{warm}");
    let baseline = rss_bytes(server.child.id());
    // Nothing else ran on this server: once idle, it counted exactly the streams the warm-up
    // dropped (a dropped stream asks for far more tokens than it reads, so none of them finished
    // on the server first).
    let page = idle_metrics(&server);
    let cancelled_before = metric(&page, CANCELLED);
    let warm_dropped = dropped_streams(&warm);
    assert_eq!(cancelled_before, warm_dropped as f64, "cancellations for {warm_dropped} dropped streams:\n{page}");

    let v = server.client("none", "load", &[name, &N.to_string(), MAX_TOKENS]);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), N, "{v}");
    for r in results {
        assert!(r.get("error").is_none(), "a request failed: {r}\n{}", server.log());
    }
    let dropped = dropped_streams(&v);
    assert_eq!(dropped, N / 4, "the client closed every fourth stream before it finished: {v}");
    // The client ran each completed prompt alone afterwards, one request at a time.
    for r in results {
        if r["cancelled"] == true {
            continue;
        }
        let prompt = r["prompt"].as_str().unwrap();
        assert_eq!(r["text"], v["solo"][prompt], "{prompt}: a completed stream differs from its solo output");
        assert_eq!(r["finish_reason"], "length", "{r}");
    }
    // Cancelled sequences leave the batch within a step: no slot stays taken, nothing waits;
    // and the server saw each stream of this round that the client dropped go.
    let page = idle_metrics(&server);
    let cancelled = metric(&page, CANCELLED) - cancelled_before;
    assert_eq!(
        cancelled, dropped as f64,
        "the server's cancellations over the round, for {dropped} dropped streams:\n{page}"
    );
    let after = rss_bytes(server.child.id());
    // KV caches of 8 slots of a few dozen positions are a few MB; a leak of 64 requests' worth
    // of caches, decoders and buffers would not fit under this bound.
    assert!(after < baseline + (64 << 20), "RSS grew from {} MB to {} MB across the load", baseline >> 20, after >> 20);
    assert!(!server.log().contains("panicked"), "{}", server.log());
}

/// The system's headless Chromium (`apt-get install chromium-headless-shell`, or chromium).
fn chromium() -> PathBuf {
    let names = ["chromium-headless-shell", "chromium", "chromium-browser"];
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
        .expect("no headless Chromium on PATH: apt-get install chromium-headless-shell")
}

/// DevTools' target list (`/json/list`); its HTTP server keeps the connection open, so the body
/// is read up to its Content-Length.
fn devtools_targets(port: &str) -> Value {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET /json/list HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "DevTools closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse().ok())
                .expect("a Content-Length");
            if body.len() >= len {
                return serde_json::from_str(&body[..len]).unwrap();
            }
        }
    }
}

/// Evaluates `expr` in the page behind a DevTools WebSocket; its value (a string).
fn evaluate(ws: &mut tungstenite::WebSocket<std::net::TcpStream>, id: u64, expr: &str) -> String {
    let call = serde_json::json!({
        "id": id, "method": "Runtime.evaluate", "params": { "expression": expr, "returnByValue": true }
    });
    ws.send(tungstenite::Message::Text(call.to_string().into())).unwrap();
    loop {
        if let tungstenite::Message::Text(t) = ws.read().unwrap() {
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["id"] == id {
                return v["result"]["result"]["value"].as_str().unwrap_or_default().to_string();
            }
        }
    }
}

/// The web page at `/` in headless Chromium: it lists the models, sends a chat message and
/// shows the streamed reply, which equals `infer run --chat` greedy.
#[test]
fn web_page_streams_a_chat_reply_in_headless_chromium() {
    let model = real_model(QWEN);
    let server = Server::start(&["--model", model.to_str().unwrap()]);
    let prompt = "Write a C function that adds two integers.";
    let root = server.base.trim_end_matches("/v1");
    let url =
        format!("{root}/?model=qwen2.5-coder-0.5b-instruct-q4_k_m&max_tokens=16&chat={}", prompt.replace(' ', "%20"));
    let profile = tempfile::tempdir().unwrap();
    // Its own process group: the distribution's launcher is a shell script that starts the
    // browser as a child, and the whole group is stopped at the end.
    let mut browser = Command::new(chromium())
        .process_group(0)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(&url)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut lines = BufReader::new(browser.stderr.take().unwrap()).lines();
    let port = loop {
        let line = lines.next().expect("chromium exited before its DevTools line").unwrap();
        if let Some(rest) = line.split("ws://127.0.0.1:").nth(1) {
            break rest.split('/').next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || lines.for_each(drop)); // keep its stderr drained
    let pages = devtools_targets(&port);
    let page = pages.as_array().unwrap().iter().find(|p| p["type"] == "page").expect("a page target");
    let ws_url = page["webSocketDebuggerUrl"].as_str().unwrap();
    let stream = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let (mut ws, _) = tungstenite::client(ws_url, stream).expect("DevTools handshake");
    let log = "document.getElementById('chat-log')";
    let start = Instant::now();
    let state = loop {
        let state = evaluate(&mut ws, 1, &format!("{log}.dataset.state || ''"));
        if state == "done" || state == "error" {
            break state;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "the page never finished: state {state:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = evaluate(&mut ws, 2, &format!("{log}.textContent"));
    let chunks: usize = evaluate(&mut ws, 3, &format!("{log}.dataset.chunks")).parse().unwrap();
    let models = evaluate(&mut ws, 4, "document.getElementById('chat-model').options.length.toString()");
    let group = format!("-{}", browser.id());
    let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
    let _ = browser.wait();
    assert_eq!(state, "done", "{text}");
    assert_eq!(text, run_text(QWEN, prompt, 16, true));
    assert!(chunks > 1, "the reply arrived in {chunks} chunk(s), not streamed");
    assert_eq!(models, "1");
}

/// `--quant` (`quant` in a server.toml) reaches a served speech model: the server's transcript
/// is `infer transcribe --quant q8_0`'s (not f32's); a text model refuses it when the server
/// starts.
#[test]
fn quant_reaches_served_speech_models_and_text_models_refuse_it() {
    let rt = fixture("voxtral-realtime/hf");
    let wav = fixture("voxtral-realtime/speech_16k.wav");
    let (rt_s, wav_s) = (rt.to_str().unwrap(), wav.to_str().unwrap());
    let cli = |extra: &[&str]| {
        let o = Infer::new(exe()).run(&[&["transcribe", "--model", rt_s, wav_s][..], extra].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8(o.stdout).unwrap().trim_end().to_string()
    };
    let want = cli(&["--quant", "q8_0"]);
    assert_ne!(want, cli(&[]), "q8_0's transcript equals f32's on the fixture");
    let server = Server::start(&["--model", rt_s, "--quant", "q8_0"]);
    let v = server.client("none", "transcribe", &["hf", wav_s, wav_s]);
    assert_eq!(v["json"], want.as_str(), "{v}");
    let o = Infer::new(exe()).run(&[
        "serve",
        "--port",
        "0",
        "--model",
        real_model(GEMMA).to_str().unwrap(),
        "--quant",
        "q8_0",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("does not quantize weights at load") && !err.contains("panicked"), "{err}");
}
