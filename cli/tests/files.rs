//! Files the CLI writes and reads, end to end through the binary: voice presets saved by concurrent
//! runs all kept, `infer speak` never leaving a partial output (a failure or Ctrl-C keeps the old
//! file), `infer quantize` and links out of the checkpoint folder, and `--no-mmap` loading the
//! same model (read into memory, not mapped) with the same output.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use infer_tests::cli::{stderr, stdout, Infer};
use infer_tests::{fixture, models_dir, repo_root};

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_infer")
}

fn infer() -> Infer {
    Infer::new(exe())
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The Qwen3-TTS fixture copied (its files, the codec beside it as the real layout has it), so
/// presets are written into a folder of the test's own.
fn copy_tts(to: &Path) -> PathBuf {
    let model = to.join("Qwen3-TTS-12Hz-tiny");
    for (from, dest) in
        [(fixture("qwen3-tts/small"), model.clone()), (fixture("qwen3-tts/codec"), to.join("Qwen3-TTS-Tokenizer-12Hz"))]
    {
        std::fs::create_dir_all(&dest).unwrap();
        for e in std::fs::read_dir(&from).unwrap() {
            let e = e.unwrap();
            if e.file_name() != "speech_tokenizer" {
                std::fs::copy(e.path(), dest.join(e.file_name())).unwrap();
            }
        }
    }
    model
}

/// The file names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Four `infer voice` runs saving different presets into one store at once: every preset is
/// there after. Each run reads the store when its model loads; before saves took a lock and
/// re-read the store, the last rename won and the others' presets were lost.
#[test]
fn concurrent_voice_saves_keep_every_preset() {
    let tmp = tempfile::tempdir().unwrap();
    let model = copy_tts(tmp.path());
    let reference = fixture("qwen3-tts/small/ref.wav");
    let names = ["ada", "bo", "cy", "di"];
    let runs: Vec<_> = names
        .iter()
        .map(|name| {
            Command::new(exe())
                .args(["voice", "--model", s(&model), "--name", name, "--ref-audio", s(&reference)])
                .env("INFER_CONFIG", repo_root().join("plugins.toml"))
                .env_remove("LD_LIBRARY_PATH")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for run in runs {
        let o = run.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let o = infer().run(&["voice", "--model", s(&model)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let listed: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    assert_eq!(listed, names, "{}", stdout(&o));
    // No temporary file is left beside the store.
    let left: Vec<String> = names_in(&model).into_iter().filter(|n| n.contains("tmp")).collect();
    assert!(left.is_empty(), "{left:?}");
}

fn speak_args<'a>(model: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["speak", "--model", model, "--text", "Files that lose nothing.", "--out", out];
    args.extend_from_slice(extra);
    args
}

/// A failing synthesis (an unknown voice) leaves no file, and an existing output is kept as it
/// was.
#[test]
fn a_failed_speak_keeps_the_old_output_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    std::fs::create_dir(&dir).unwrap();
    let out = dir.join("speech.wav");
    let model = fixture("qwen3-tts/small");
    let o = infer().run(&speak_args(s(&model), s(&out), &["--voice", "nobody", "--max-frames", "4"]));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("nobody"), "{}", stderr(&o));
    assert!(names_in(&dir).is_empty(), "{:?}", names_in(&dir));
    std::fs::write(&out, "the old take").unwrap();
    let o = infer().run(&speak_args(s(&model), s(&out), &["--voice", "nobody", "--max-frames", "4"]));
    assert!(!o.status.success());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "the old take");
    assert_eq!(names_in(&dir), ["speech.wav"]);
    // A success replaces it whole.
    let o = infer().run(&speak_args(s(&model), s(&out), &["--temperature", "0", "--max-frames", "4"]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(infer_core::audio_io::read_audio(&out).unwrap().audio.duration_secs() > 0.0);
    assert_eq!(names_in(&dir), ["speech.wav"]);
}

/// Ctrl-C in the middle of a synthesis: the run stops, the partial file is removed and the old
/// output is untouched (before, the half-written `speech.wav.partial` stayed behind).
#[test]
fn ctrl_c_during_speak_leaves_the_old_output() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    std::fs::create_dir(&dir).unwrap();
    let out = dir.join("speech.wav");
    std::fs::write(&out, "the old take").unwrap();
    let model = fixture("qwen3-tts/small");
    // Sampled, so the fixture does not stop early; far more frames than the test waits for.
    let args = speak_args(s(&model), s(&out), &["--stream", "--max-frames", "100000", "--seed", "1"]);
    let mut child = Command::new(exe())
        .args(&args)
        .env("INFER_CONFIG", repo_root().join("plugins.toml"))
        .env_remove("LD_LIBRARY_PATH")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the partial file to appear (synthesis under way), then interrupt.
    let start = Instant::now();
    while names_in(&dir).len() < 2 {
        assert!(child.try_wait().unwrap().is_none(), "speak ended before it was interrupted");
        assert!(start.elapsed() < Duration::from_secs(120), "no partial file appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let o = child.wait_with_output().unwrap();
    assert!(!o.status.success(), "an interrupted run must fail: {}", stderr(&o));
    assert!(stderr(&o).contains("interrupted"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "the old take");
    assert_eq!(names_in(&dir), ["speech.wav"]);
}

/// The Voxtral Realtime fixture copied file by file, to add links to.
fn copy_checkpoint(to: &Path) -> PathBuf {
    let src = fixture("voxtral-realtime/hf");
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    to.to_path_buf()
}

/// `infer quantize` and symbolic links: links out of the checkpoint (a file, and a folder: here a
/// "home" with a private key) are read and copied as ordinary files and folders, each named on
/// stderr before anything is read, never written through; a link to something that is not a file
/// (a FIFO, which would block the copy forever) is refused. Before, every link was followed
/// silently and the FIFO hung the copy.
#[test]
fn quantize_says_which_links_lead_out_of_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
    std::fs::write(home.join("README.md"), "read me").unwrap();
    let ckpt = copy_checkpoint(&tmp.path().join("ckpt"));
    let out = tmp.path().join("out");
    let args = ["quantize", "--model", s(&ckpt), "--quant", "q8_0", "--out", s(&out)];

    let fifo = tmp.path().join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    std::os::unix::fs::symlink(&fifo, ckpt.join("notes.txt")).unwrap();
    infer().assert_clean_error(&args, &["notes.txt", "not a regular file"]);
    assert!(!out.exists());
    assert!(!names_in(tmp.path()).iter().any(|n| n.contains("partial")), "{:?}", names_in(tmp.path()));
    std::fs::remove_file(ckpt.join("notes.txt")).unwrap();

    std::os::unix::fs::symlink(&home, ckpt.join("extras")).unwrap();
    std::os::unix::fs::symlink(home.join("README.md"), ckpt.join("README.md")).unwrap();
    let o = infer().run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    for link in ["extras", "README.md"] {
        let line = err.lines().find(|l| l.contains(&format!("{link} links to"))).unwrap_or_else(|| panic!("{err}"));
        assert!(line.starts_with("warning: ") && line.contains("outside the checkpoint"), "{line}");
    }
    for copied in [out.join("README.md"), out.join("extras"), out.join("extras/.ssh/id_ed25519")] {
        assert!(!copied.symlink_metadata().unwrap().file_type().is_symlink(), "{}", copied.display());
    }
    assert_eq!(std::fs::read_to_string(out.join("README.md")).unwrap(), "read me");
    assert_eq!(std::fs::read_to_string(home.join("README.md")).unwrap(), "read me");
}

const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";

/// Greedy text of the GGUF model, mapped and with `--no-mmap`: the same.
#[test]
fn no_mmap_loads_gguf_and_safetensors_with_the_same_output() {
    let gemma = models_dir().join(GEMMA);
    assert!(gemma.exists(), "{} is missing: fetch it with tools/models/fetch.sh", gemma.display());
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--model", s(&gemma), "-p", "The capital of France is", "--max-tokens", "12"];
        args.extend(["--temperature", "0", "--json"]);
        args.extend_from_slice(extra);
        let o = infer().run(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["text"].as_str().unwrap().to_string()
    };
    let mapped = run(&[]);
    assert!(!mapped.is_empty());
    assert_eq!(run(&["--no-mmap"]), mapped);

    // Safetensors (the Voxtral Realtime fixture): the same transcript.
    let transcribe = |extra: &[&str]| {
        let rt = fixture("voxtral-realtime/hf");
        let speech = fixture("voxtral-realtime/speech_16k.wav");
        let mut args = vec!["transcribe", "--model", s(&rt), s(&speech), "--json"];
        args.extend_from_slice(extra);
        let o = infer().run(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        // The metrics (times) differ run to run; the tokens and text must not.
        format!("{} {}", v["tokens"], v["text"])
    };
    assert_eq!(transcribe(&["--no-mmap"]), transcribe(&[]));
}

/// `--no-mmap` reads the weights into memory: a running server has no mapping of the model file
/// (it has one without the flag), so replacing the file under it cannot change its weights.
#[test]
fn no_mmap_server_keeps_no_mapping_of_the_weights() {
    let gemma = models_dir().join(GEMMA);
    assert!(gemma.exists(), "{} is missing: fetch it with tools/models/fetch.sh", gemma.display());
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join(GEMMA);
    std::fs::copy(&gemma, &copy).unwrap();
    for no_mmap in [false, true] {
        let mut cmd = Command::new(exe());
        if no_mmap {
            cmd.arg("--no-mmap");
        }
        let mut child = cmd
            .args(["serve", "--port", "0", "--model", s(&copy)])
            .env("INFER_CONFIG", repo_root().join("plugins.toml"))
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("INFER_NO_MMAP")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
        let mut log = String::new();
        let listening = lines.by_ref().map_while(Result::ok).any(|l| {
            log.push_str(&l);
            l.starts_with("listening on ")
        });
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(listening, "the server did not start: {log}");
        let mapped = maps.lines().any(|l| l.ends_with(s(&copy)));
        assert_eq!(mapped, !no_mmap, "--no-mmap {no_mmap}: the weights file mapped: {mapped}");
    }
}
