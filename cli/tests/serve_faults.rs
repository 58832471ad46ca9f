//! The fault and load test: `infer serve` on a loopback port (Gemma 3 270M and the Voxtral
//! Realtime fixture), driven for a few minutes by cli/tests/serve_faults.py with rounds of 64
//! concurrent streaming chats (a quarter dropped) beside slowloris headers, slow bodies, idle
//! connections, oversized and malformed bodies, an audio bomb, a silent WebSocket and requests
//! that make the scheduler panic or fail (the test-only fault hook, `INFER_FAULT_HOOKS=1`), then
//! SIGTERM with streams in flight. Every request must end the way it should (completed, dropped
//! by its client, refused with the right status, or cut off): none is lost; every completed
//! greedy stream equals its prompt's output alone; memory stays bounded and settles; the server
//! exits cleanly. The figures print on stderr (docs/reliability.md quotes them).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use infer_core::audio::Audio;
use infer_core::audio_io::{encode_audio, AudioFormat};
use infer_tests::cli::stderr;
use infer_tests::serve::{client_python, start_serve};
use infer_tests::{fixture, models_dir, repo_root};
use serde_json::Value;

const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";
/// Seconds of mixed load before the reference and shutdown phases (`INFER_FAULT_SECONDS`).
const MIX_SECONDS: &str = "120";

struct Server {
    child: Child,
    base: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(config: &std::path::Path) -> Server {
        let started = start_serve(
            env!("CARGO_BIN_EXE_infer"),
            &["--config", config.to_str().unwrap()],
            &[("INFER_FAULT_HOOKS", "1")],
            Duration::from_secs(180),
        );
        Server { child: started.child, base: format!("http://{}/v1", started.addr), log: started.log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
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

/// Ten minutes of 16 kHz silence as FLAC: a few kilobytes that decode to 38 MB of f32, twenty
/// times the server's `max_audio_seconds` here.
fn audio_bomb(dir: &std::path::Path) -> PathBuf {
    let audio = Audio::new(vec![0.0; 16_000 * 600], 16_000);
    let bytes = encode_audio(&audio, AudioFormat::Flac).expect("encode the bomb");
    assert!(bytes.len() < 200_000, "the bomb is {} bytes: not a bomb", bytes.len());
    let path = dir.join("silence.flac");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn faults_and_load_lose_no_request() {
    let gemma = models_dir().join(GEMMA);
    assert!(gemma.exists(), "{} is missing: fetch the real models with tools/models/fetch.sh", gemma.display());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.toml");
    // Short limits, so each attack is cut off within seconds.
    std::fs::write(
        &config,
        format!(
            "parallel = 8\nqueue = 96\nheader_timeout_secs = 2\nbody_timeout_secs = 3\nidle_timeout_secs = 3\n\
             ws_idle_timeout_secs = 3\nmax_audio_seconds = 30\nmax_upload_bytes = 2000000\n\
             [[models]]\nname = \"gemma\"\npath = {gemma:?}\n\
             [[models]]\nname = \"asr\"\npath = {:?}\nparallel = 2\n",
            fixture("voxtral-realtime/hf")
        ),
    )
    .unwrap();
    let bomb = audio_bomb(dir.path());
    let mut server = Server::start(&config);
    let seconds = std::env::var("INFER_FAULT_SECONDS").unwrap_or_else(|_| MIX_SECONDS.into());
    let started = Instant::now();
    let o = Command::new(client_python())
        .arg(repo_root().join("cli/tests/serve_faults.py"))
        .args([&server.base, &server.child.id().to_string(), "gemma", "asr"])
        .arg(&bomb)
        .arg(&seconds)
        .output()
        .expect("run the fault mix");
    assert!(o.status.success(), "the fault mix failed: {}\nserver log:\n{}", stderr(&o), server.log());
    let v: Value = serde_json::from_slice(&o.stdout).expect("the mix prints JSON");
    let status = wait_exit(&mut server.child);

    // Tally: every request ended as it should; any other ending is a lost request.
    let records = v["records"].as_array().unwrap();
    let mut tally: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut lost = Vec::new();
    for r in records {
        let kind = r["kind"].as_str().unwrap().to_string();
        let ok = r["got"] == "ok" || r["got"] == "cut" || (r["got"].is_number() && r["got"] == r["expected"]);
        let entry = tally.entry(kind).or_default();
        entry.0 += 1;
        if ok {
            entry.1 += 1;
        } else {
            lost.push(r.clone());
        }
    }
    let mut figures = format!(
        "fault mix: {} rounds of 64 streams in {} s, {} requests, {} lost; RSS after loading {} MB, after a \
         warm-up round {} MB, peak {} MB, end {} MB\n",
        v["rounds"],
        v["mix_seconds"],
        records.len(),
        lost.len(),
        v["rss_start"].as_u64().unwrap() >> 20,
        v["rss_warm"].as_u64().unwrap() >> 20,
        v["rss_peak"].as_u64().unwrap() >> 20,
        v["rss_end"].as_u64().unwrap() >> 20,
    );
    for (kind, (n, ok)) in &tally {
        figures.push_str(&format!("  {kind}: {n} sent, {ok} ended as expected\n"));
    }
    let cut_seconds: Vec<f64> = records.iter().filter_map(|r| r["seconds"].as_f64()).collect();
    if let Some(max) = cut_seconds.iter().cloned().reduce(f64::max) {
        figures.push_str(&format!("  slowest cut-off: {max:.1} s\n"));
    }
    eprintln!("{figures}");
    assert!(lost.is_empty(), "{} request(s) lost:\n{:#?}\n{figures}\nserver log:\n{}", lost.len(), lost, server.log());

    // Every kind of request was tried, and enough of the load ran.
    for kind in [
        "stream",
        "stream under SIGTERM",
        "slowloris headers",
        "slow body",
        "idle keep-alive",
        "silent websocket",
        "oversized body",
        "malformed JSON",
        "deeply nested JSON",
        "audio bomb",
        "panicking request",
        "failing step",
        "health",
    ] {
        assert!(tally.get(kind).is_some_and(|t| t.0 > 0), "no `{kind}` request ran:\n{figures}");
    }
    // Completed greedy streams equal their prompt alone, whatever else shared the batch.
    let solo = &v["solo"];
    for r in records.iter().filter(|r| r["expected"] == "completed") {
        let prompt = r["prompt"].as_str().unwrap();
        assert!(solo[prompt].is_string(), "no solo output for {prompt}");
        assert_eq!(
            r["text"],
            solo[prompt],
            "{prompt}: a completed stream differs from its solo output ({}); the server's failed steps and \
             timeouts:\n{}",
            r["kind"],
            server
                .log()
                .lines()
                .filter(|l| l.contains("timeout") || l.contains("step failed"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // Bounded memory: the bombs never decode past 30 s of audio, and what the mix leaves over the
    // warm-up round (same load, no attacks) is allocator noise, not rounds of leaked requests.
    let (warm, peak, end) =
        (v["rss_warm"].as_u64().unwrap(), v["rss_peak"].as_u64().unwrap(), v["rss_end"].as_u64().unwrap());
    assert!(peak < warm + (1 << 30), "peak RSS {} MB, {} MB after the warm-up round", peak >> 20, warm >> 20);
    assert!(end < warm + (128 << 20), "RSS {} MB after the load, {} MB after the warm-up", end >> 20, warm >> 20);
    assert!(status.success(), "exit status {status} after SIGTERM: {}", server.log());
    assert!(server.log().contains("stopped"), "{}", server.log());
    eprintln!("fault test took {:.0} s", started.elapsed().as_secs_f64());
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "the server did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}
