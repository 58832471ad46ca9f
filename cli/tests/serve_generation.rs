//! `infer serve` end to end on generation limits and faults: huge `max_tokens` end at
//! `max_tokens_limit` or the context, `ignore_eos` on a rotating cache ends, a request past
//! `request_timeout_secs` ends with its text so far, the KV budget lowers slots or refuses to start,
//! one panicking or failing request fails alone while the streams beside it complete as they
//! would alone (the test-only fault hook, `INFER_FAULT_HOOKS=1`), a dead scheduler shows on
//! /health, and a 4 MB prompt being tokenized does not stall other streams. Raw HTTP/1.1 over
//! loopback, so every byte and status is the server's.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use infer_tests::serve::{dechunk, spawn_serve, start_serve, Spawned};
use infer_tests::{fixture, models_dir};
use serde_json::{json, Value};

const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";
/// A tiny Qwen3 checkpoint: 2 layers, a context of 512 positions, loads and decodes fast.
const TINY: &str = "qwen3/gqa";
/// Generous bound for anything a test waits on.
const PATIENCE: Duration = Duration::from_secs(300);

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_infer")
}

fn gemma() -> PathBuf {
    let p = models_dir().join(GEMMA);
    assert!(p.exists(), "{} is missing: fetch the real models with tools/models/fetch.sh", p.display());
    p
}

/// A running `infer serve`; killed on drop.
struct Server {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
}

/// Writes `server.toml` in `dir`: `top` lines, then one model named `m`.
fn config(dir: &Path, top: &str, model: &Path, model_lines: &str) -> PathBuf {
    let path = dir.join("server.toml");
    std::fs::write(&path, format!("{top}\n[[models]]\nname = \"m\"\npath = {model:?}\n{model_lines}\n")).unwrap();
    path
}

/// The environment that turns the server's fault hooks on, or nothing.
fn fault_env(faults: bool) -> &'static [(&'static str, &'static str)] {
    if faults {
        &[("INFER_FAULT_HOOKS", "1")]
    } else {
        &[]
    }
}

fn spawn(config: &Path, faults: bool) -> Spawned {
    spawn_serve(exe(), &["--config", config.to_str().unwrap()], fault_env(faults))
}

impl Server {
    fn start(config: &Path, faults: bool) -> Server {
        let args = ["--config", config.to_str().unwrap()];
        let started = start_serve(exe(), &args, fault_env(faults), Duration::from_secs(120));
        Server { child: started.child, addr: started.addr, log: started.log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s
    }

    fn send(&self, method: &str, path: &str, body: &[u8]) -> TcpStream {
        let mut s = self.connect();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            self.addr,
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body).unwrap();
        s
    }

    /// A whole response: status and JSON body.
    fn request(&self, method: &str, path: &str, body: &Value) -> (u16, Value) {
        let body = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
        let mut raw = Vec::new();
        self.send(method, path, &body).read_to_end(&mut raw).unwrap();
        let raw = String::from_utf8(raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no response: {raw:?}"));
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        let body =
            if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(body) } else { body.into() };
        let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"));
        (status, json)
    }

    fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.request("POST", path, &body)
    }

    /// A streamed completion: the status and a reader of its `data:` payloads.
    fn stream(&self, body: Value) -> Stream {
        let mut r = BufReader::new(self.send("POST", "/v1/completions", body.to_string().as_bytes()));
        let mut status = String::new();
        r.read_line(&mut status).unwrap();
        let status =
            status.split_whitespace().nth(1).unwrap_or_else(|| panic!("no status: {status:?}")).parse().unwrap();
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
        }
        Stream { status, reader: r }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Stream {
    status: u16,
    reader: BufReader<TcpStream>,
}

impl Stream {
    /// The next `data:` payload (`None` at the end of the body).
    fn next_data(&mut self) -> Option<String> {
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).unwrap() == 0 {
                return None;
            }
            if let Some(d) = line.strip_prefix("data: ") {
                return Some(d.trim_end().to_string());
            }
        }
    }

    /// Reads to the end: the text, the finish reason, and whether `[DONE]` closed it (an error
    /// event is returned as `Err`).
    fn finish(mut self, mut text: String) -> Result<(String, String, bool), Value> {
        let mut reason = String::new();
        while let Some(d) = self.next_data() {
            if d == "[DONE]" {
                return Ok((text, reason, true));
            }
            let v: Value = serde_json::from_str(&d).unwrap();
            if v.get("error").is_some() {
                return Err(v);
            }
            text.push_str(v["choices"][0]["text"].as_str().unwrap_or_default());
            if let Some(r) = v["choices"][0]["finish_reason"].as_str() {
                reason = r.to_string();
            }
        }
        Ok((text, reason, false))
    }

    /// The text of the first chunk that has some.
    fn first_text(&mut self) -> String {
        while let Some(d) = self.next_data() {
            let v: Value = serde_json::from_str(&d).unwrap();
            assert!(v.get("error").is_none(), "the stream failed: {v}");
            let t = v["choices"][0]["text"].as_str().unwrap_or_default();
            if !t.is_empty() {
                return t.to_string();
            }
        }
        panic!("the stream ended before any text");
    }
}

fn completion(prompt: Value, extra: Value) -> Value {
    let mut body = json!({ "model": "m", "prompt": prompt, "temperature": 0 });
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

#[test]
fn huge_max_tokens_end_at_the_limit_or_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let body = completion(json!([1, 2, 3]), json!({ "max_tokens": i64::MAX, "ignore_eos": true }));
    // Lowered to max_tokens_limit.
    let server = Server::start(&config(dir.path(), "max_tokens_limit = 24", &fixture(TINY), ""), false);
    let (status, v) = server.post("/v1/completions", body.clone());
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 24, "{v}");
    // Lowered to the context left after the prompt (512 positions).
    drop(server);
    let server = Server::start(&config(dir.path(), "max_tokens_limit = 100000", &fixture(TINY), ""), false);
    let (status, v) = server.post("/v1/completions", body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert_eq!(v["usage"]["total_tokens"], 512, "{v}");
}

#[test]
fn ignore_eos_on_a_rotating_cache_ends_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    // A rotating cache of 64 positions never fills: only max_tokens_limit ends this.
    let cfg = config(dir.path(), "max_tokens_limit = 300", &fixture(TINY), "context_len = 64");
    let server = Server::start(&cfg, false);
    let body = completion(json!([1, 2, 3]), json!({ "max_tokens": i64::MAX, "ignore_eos": true }));
    let (status, v) = server.post("/v1/completions", body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 300, "{v}");
}

#[test]
fn request_timeout_ends_a_long_generation_with_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        "request_timeout_secs = 2\nmax_tokens_limit = 100000000",
        &fixture(TINY),
        "context_len = 64",
    );
    let server = Server::start(&cfg, false);
    let body = completion(json!([1, 2, 3]), json!({ "max_tokens": 100_000_000, "ignore_eos": true }));
    let (status, v) = server.post("/v1/completions", body.clone());
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    let n = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(n > 0 && n < 100_000_000, "{v}");
    assert!(!v["choices"][0]["text"].as_str().unwrap().is_empty(), "{v}");
    // Streamed: the text so far, the finish reason, [DONE].
    let mut b = body;
    b["stream"] = json!(true);
    let s = server.stream(b);
    assert_eq!(s.status, 200);
    let (text, reason, done) = s.finish(String::new()).unwrap();
    assert!(!text.is_empty() && reason == "length" && done, "{text:?} {reason} {done}");
    let log = server.log();
    assert_eq!(log.matches("request timeout: ").count(), 2, "{log}");
}

#[test]
fn the_kv_budget_lowers_slots_or_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    // One slot: 2 layers x 2 KV heads x 16 x f32 x 2 x (512 + 256) positions = 0.375 MiB.
    let cfg = config(dir.path(), "parallel = 4\nkv_budget_mib = 1", &fixture(TINY), "");
    let server = Server::start(&cfg, false);
    let log = server.log();
    assert!(log.contains("kv budget: ") && log.contains("m 4 -> 2 slots"), "{log}");
    assert!(log.contains(", 2 batch slots in "), "{log}");
    let (status, v) = server.post("/v1/completions", completion(json!([1, 2, 3]), json!({ "max_tokens": 4 })));
    assert_eq!(status, 200, "{v}");
    drop(server);
    // A rotating cache of 4096 positions: 2.1 MiB for one slot.
    let cfg = config(dir.path(), "kv_budget_mib = 1", &fixture(TINY), "context_len = 4096");
    let Spawned { mut child, log, .. } = spawn(&cfg, false);
    let status = child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let log = log.lock().unwrap().clone();
    assert!(!status.success(), "{log}");
    let errors: Vec<&str> = log.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "{log}");
    assert!(errors[0].contains("over the KV budget of 1 MiB (kv_budget_mib)"), "{log}");
}

/// Greedy streamed completions of `prompts` run together, started one after the other (each
/// once the previous has its first token); their texts.
fn together(server: &Server, prompts: &[&str], max_tokens: usize, then: impl FnOnce()) -> Vec<String> {
    let mut streams = Vec::new();
    for p in prompts {
        let mut s = server.stream(completion(json!(p), json!({ "max_tokens": max_tokens, "stream": true })));
        assert_eq!(s.status, 200);
        let first = s.first_text();
        streams.push((s, first));
    }
    then();
    streams.into_iter().map(|(s, first)| s.finish(first).expect("the stream failed").0).collect()
}

#[test]
fn a_panicking_or_failing_request_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&config(dir.path(), "parallel = 4", &gemma(), ""), true);
    let prompts = ["The capital of France is", "def fibonacci(n):"];
    let solo: Vec<String> = prompts.iter().map(|p| together(&server, &[p], 48, || {}).remove(0)).collect();
    for fault in ["infer-fault:panic", "infer-fault:error"] {
        let got = together(&server, &prompts, 48, || {
            let body = completion(json!("Hello"), json!({ "max_tokens": 8, "user": fault }));
            let (status, v) = server.post("/v1/completions", body);
            assert_eq!(status, 500, "{fault}: {v}");
            assert_eq!(v["error"]["type"], "server_error", "{v}");
        });
        // Resumed streams recompute their tokens so far as they were computed (a prefill of the
        // prompt, then one decode step per token): they go on exactly as they would have.
        assert_eq!(got, solo, "{fault}: the streams beside the fault differ from their solo output");
        let (status, v) = server.request("GET", "/health", &Value::Null);
        assert_eq!((status, v["status"].as_str()), (200, Some("ok")), "{v}");
    }
    // The next requests are served as before, and the restarts are counted.
    assert_eq!(together(&server, &prompts[..1], 48, || {}), solo[..1]);
    let (_, v) = server.request("GET", "/health", &Value::Null);
    assert_eq!(v["models"]["m"]["restarts"], 2, "{v}");
    // Without INFER_FAULT_HOOKS the field is just a user name.
    drop(server);
    let server = Server::start(&config(dir.path(), "", &fixture(TINY), ""), false);
    let body = completion(json!([1, 2, 3]), json!({ "max_tokens": 4, "user": "infer-fault:panic" }));
    assert_eq!(server.post("/v1/completions", body).0, 200);
}

#[test]
fn a_dead_scheduler_shows_on_health() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&config(dir.path(), "", &fixture(TINY), ""), true);
    let (status, v) = server.request("GET", "/health", &Value::Null);
    assert_eq!((status, v["models"]["m"]["alive"].as_bool()), (200, Some(true)), "{v}");
    let body = completion(json!([1, 2, 3]), json!({ "max_tokens": 4, "user": "infer-fault:abort-scheduler" }));
    // The thread marks itself dead before its requests' channels close: 503 for this one too.
    let (status, v) = server.post("/v1/completions", body);
    assert_eq!(status, 503, "{v}");
    let (status, v) = server.request("GET", "/health", &Value::Null);
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["dead"], json!(["m"]), "{v}");
    let (status, v) = server.post("/v1/completions", completion(json!([1, 2, 3]), json!({ "max_tokens": 4 })));
    assert_eq!(status, 503, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("scheduler of `m` stopped"), "{v}");
}

#[test]
fn long_prompts_are_tokenized_off_the_async_workers() {
    let dir = tempfile::tempdir().unwrap();
    // One 4 MB prompt per async worker (the runtime has one per core), each seconds of
    // tokenizing; one permit more than them, so the small request gets one.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let top = format!("prepare_tasks = {}", workers + 1);
    let server = Server::start(&config(dir.path(), &top, &gemma(), ""), false);
    // A stop string past max_stop_bytes (1024) is refused.
    let long_stop = "x".repeat(2048);
    let (status, v) = server.post("/v1/completions", completion(json!("Hi"), json!({ "stop": long_stop })));
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("stop")), "{v}");
    let big = "the quick brown fox jumps over the lazy dog ".repeat(4_000_000 / 44);
    let started = Instant::now();
    let bigs: Vec<_> = (0..workers)
        .map(|_| {
            let body = completion(json!(big), json!({ "max_tokens": 1 })).to_string().into_bytes();
            let mut s = server.send("POST", "/v1/completions", &body);
            std::thread::spawn(move || {
                let mut out = String::new();
                let _ = s.read_to_string(&mut out);
                (Instant::now(), out)
            })
        })
        .collect();
    // Let the bodies arrive and their tokenizations begin.
    std::thread::sleep(Duration::from_secs(2));
    let mut small =
        server.stream(completion(json!("The capital of France is"), json!({ "max_tokens": 8, "stream": true })));
    assert_eq!(small.status, 200);
    small.first_text();
    let first_token = Instant::now();
    let ends: Vec<(Instant, String)> = bigs.into_iter().map(|t| t.join().unwrap()).collect();
    let done = ends.iter().map(|(t, _)| *t).min().unwrap();
    eprintln!(
        "small stream's first token after {:.1} s; first 4 MB prompt answered after {:.1} s",
        (first_token - started).as_secs_f64(),
        (done - started).as_secs_f64()
    );
    for (_, out) in &ends {
        assert!(out.starts_with("HTTP/1.1 400"), "{}", &out[..out.len().min(300)]);
        assert!(out.contains("context_length_exceeded"), "{}", &out[..out.len().min(300)]);
    }
    assert!(first_token < done, "the small stream waited for the 4 MB prompts' tokenization");
}
