//! `infer serve` as the end-to-end tests run it: the real binary on a free loopback port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::repo_root;

/// A started server: its process, the address its `listening on http://ADDR` line names (no
/// scheme), and its stderr so far (filled by a thread as it prints).
pub struct Started {
    pub child: Child,
    pub addr: String,
    pub log: Arc<Mutex<String>>,
}

/// A server process just spawned: `listening` receives the address of its listening line (no
/// scheme) once it prints one.
pub struct Spawned {
    pub child: Child,
    pub log: Arc<Mutex<String>>,
    pub listening: Receiver<String>,
}

/// Spawns `exe serve --port 0 ARGS` with the repository's plugins.toml, without the caller's
/// INFER_API_KEY, LD_LIBRARY_PATH and INFER_FAULT_HOOKS, plus `envs`.
pub fn spawn_serve(exe: &str, args: &[&str], envs: &[(&str, &str)]) -> Spawned {
    let mut child = Command::new(exe)
        .args(["serve", "--port", "0"])
        .args(args)
        .env("INFER_CONFIG", repo_root().join("plugins.toml"))
        .env_remove("INFER_API_KEY")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("INFER_FAULT_HOOKS")
        .envs(envs.iter().copied())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start infer serve");
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, listening) = std::sync::mpsc::channel();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let sink = log.clone();
    std::thread::spawn(move || {
        while let Some(Ok(line)) = lines.next() {
            // Logged first: lines printed before it (warnings) are in the log once it starts.
            sink.lock().unwrap().push_str(&(line.clone() + "\n"));
            if let Some(addr) = line.strip_prefix("listening on http://") {
                let _ = tx.send(addr.split_whitespace().next().unwrap_or_default().to_string());
            }
        }
    });
    Spawned { child, log, listening }
}

/// [`spawn_serve`], then waits up to `within` for the listening line; a server that does not
/// start is killed and the test fails with its log.
pub fn start_serve(exe: &str, args: &[&str], envs: &[(&str, &str)], within: Duration) -> Started {
    let Spawned { mut child, log, listening } = spawn_serve(exe, args, envs);
    match listening.recv_timeout(within) {
        Ok(addr) => Started { child, addr, log },
        Err(_) => {
            let _ = child.kill();
            panic!("the server did not start: {}", log.lock().unwrap());
        }
    }
}

/// The body of an HTTP/1.1 chunked response, its chunks joined (panics on a malformed one: a
/// test's server wrote it).
pub fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
}

/// One HTTP/1.1 request to `addr` (`body` null: none), its status and body (dechunked): raw over
/// loopback, so every byte and status is the server's.
pub fn http(addr: &str, method: &str, path: &str, body: &serde_json::Value) -> (u16, String) {
    let body = if body.is_null() { String::new() } else { body.to_string() };
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no response: {raw:?}"));
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(body) } else { body.into() };
    (status, body)
}

/// The `data:` payloads of an SSE body, `[DONE]` left out (it must be last).
pub fn sse_events(body: &str) -> Vec<serde_json::Value> {
    let data: Vec<&str> = body.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{body}");
    data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect()
}

/// A server of the models a `server.toml` lists, killed when dropped.
pub struct Served {
    pub child: Child,
    pub addr: String,
    pub log: Arc<Mutex<String>>,
}

impl Served {
    /// `exe serve --config CONFIG`, waiting up to `within` for it to listen.
    pub fn start(exe: &str, config: &std::path::Path, within: Duration) -> Served {
        let Started { child, addr, log } = start_serve(exe, &["--config", config.to_str().unwrap()], &[], within);
        Served { child, addr, log }
    }

    /// POSTs `body` to `path` and returns the JSON answer, which must have status `want`.
    pub fn json(&self, path: &str, body: &serde_json::Value, want: u16) -> serde_json::Value {
        let (status, text) = http(&self.addr, "POST", path, body);
        assert_eq!(status, want, "{body}\n-> {text}\nserver log:\n{}", self.log());
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `server.toml` serving each (name, path) pair.
pub fn models_toml(models: &[(&str, &std::path::Path)]) -> String {
    models.iter().map(|(name, path)| format!("[[models]]\nname = \"{name}\"\npath = {path:?}\n")).collect()
}

/// The python of the pinned client venv (tools/serve/setup_openai_venv.sh: `openai`,
/// `openai-agents`, `jsonschema`), made once per test binary.
pub fn client_python() -> &'static str {
    static PY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PY.get_or_init(|| {
        let o = Command::new(repo_root().join("tools/serve/setup_openai_venv.sh")).output().expect("run setup script");
        assert!(o.status.success(), "setup_openai_venv.sh failed: {}", crate::cli::stderr(&o));
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    })
}

/// `exe serve` of the real models named (name in requests, file in the model cache), its
/// config written in `dir`.
pub fn serve_real_models(exe: &str, dir: &std::path::Path, models: &[(&str, &str)]) -> Served {
    let paths: Vec<(&str, std::path::PathBuf)> =
        models.iter().map(|(name, file)| (*name, crate::real_model(file))).collect();
    let listed: Vec<(&str, &std::path::Path)> = paths.iter().map(|(n, p)| (*n, p.as_path())).collect();
    let config = dir.join("server.toml");
    std::fs::write(&config, models_toml(&listed)).unwrap();
    Served::start(exe, &config, Duration::from_secs(180))
}
