//! End-to-end tests of the `infer` binary: real fixtures in, tokens/text/JSON out, and bad
//! input giving one clear error line with a non-zero exit code (never a panic).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use infer_tests::cli::{stderr, stdout, Infer};
use infer_tests::{fixture, golden, plugin_library};

fn infer(args: &[&str]) -> Output {
    Infer::new(env!("CARGO_BIN_EXE_infer")).run(args)
}

/// With the default cache and with an f16 one (whose rounding does not flip this case's greedy
/// ids; `generation.rs` bounds its effect on the logits).
#[test]
fn run_json_prints_transformers_greedy_ids() {
    for kv in [&[][..], &["--kv-dtype", "f16"][..]] {
        run_json_prints_transformers_greedy_ids_with(kv);
    }
}

fn run_json_prints_transformers_greedy_ids_with(extra: &[&str]) {
    let dir = fixture("qwen3/gqa");
    let case = &golden(&dir).cases[1];
    let ids: Vec<String> = case.ids.iter().map(u32::to_string).collect();
    let max_tokens = case.greedy.len().to_string();
    let prompt = ids.join(",");
    let mut args = vec![
        "run",
        "--model",
        dir.to_str().unwrap(),
        "--prompt-tokens",
        &prompt,
        "--max-tokens",
        &max_tokens,
        "--ignore-eos",
        "--temperature",
        "0",
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = infer(&args);
    assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let got: Vec<u32> = v["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
    assert_eq!(got, case.greedy, "{extra:?}");
    assert_eq!(v["metrics"]["prompt_tokens"].as_u64().unwrap() as usize, case.ids.len());
    assert_eq!(v["metrics"]["generated_tokens"].as_u64().unwrap() as usize, case.greedy.len());
    assert!(v["text"].is_string());
}

#[test]
fn run_streams_text_for_a_text_prompt() {
    let dir = fixture("qwen3/sharded");
    let o = infer(&["run", "-m", dir.to_str().unwrap(), "-p", "The river", "--max-tokens", "8", "--ignore-eos"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).trim().is_empty());
    assert!(stderr(&o).contains("decode"), "metrics line: {}", stderr(&o));
}

#[test]
fn sampling_is_reproducible_with_a_seed() {
    let dir = fixture("qwen3/gqa");
    let run = |seed: &str, temperature: &str| {
        let o = infer(&[
            "run",
            "-m",
            dir.to_str().unwrap(),
            "-p",
            "The river",
            "--max-tokens",
            "16",
            "--temperature",
            temperature,
            "--top-k",
            "40",
            "--top-p",
            "0.95",
            "--min-p",
            "0.01",
            "--repeat-penalty",
            "1.1",
            "--seed",
            seed,
            "--ignore-eos",
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        v["tokens"].clone()
    };
    let (one, two) = (run("1", "0.9"), run("2", "0.9"));
    assert_eq!(one, run("1", "0.9"));
    assert_ne!(one, two, "another seed must give another sample");
    // Each seed samples: neither sequence is the greedy one.
    let greedy = run("1", "0");
    assert_ne!(one, greedy, "seed 1 gave the greedy tokens");
    assert_ne!(two, greedy, "seed 2 gave the greedy tokens");
}

/// With no sampling flags `run` samples (the checkpoint's or the built-in defaults), and
/// `--temperature 0` is greedy.
#[test]
fn run_samples_by_default_and_temperature_zero_is_greedy() {
    let dir = fixture("qwen3/gqa");
    let case = &golden(&dir).cases[1];
    let prompt = case.ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let n = case.greedy.len().to_string();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "-m", dir.to_str().unwrap(), "--prompt-tokens", &prompt, "--max-tokens", &n];
        args.extend_from_slice(&["--ignore-eos", "--json"]);
        args.extend_from_slice(extra);
        let o = infer(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        v["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect::<Vec<u32>>()
    };
    assert_eq!(run(&["--temperature", "0"]), case.greedy);
    let samples: Vec<Vec<u32>> = (1..=3).map(|s| run(&["--seed", &s.to_string()])).collect();
    assert!(samples.iter().any(|s| *s != case.greedy), "default sampling is not greedy");
}

#[test]
fn chat_on_a_checkpoint_without_template_says_which_format_it_uses() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("model");
    infer_tests::copy_dir(&fixture("gemma3/base"), &dir, &[]);
    let cfg = dir.join("tokenizer_config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("chat_template");
    std::fs::write(&cfg, v.to_string()).unwrap();
    let o = infer(&["run", "-m", dir.to_str().unwrap(), "-p", "hi", "--chat", "--max-tokens", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let notes: Vec<&str> = err.lines().filter(|l| l.starts_with("note:")).collect();
    assert_eq!(notes.len(), 1, "{}", stderr(&o));
    assert!(notes[0].contains("Gemma turns") && notes[0].contains("--chat-template"), "{}", notes[0]);
    let tmpl = tmp.path().join("t.jinja");
    std::fs::write(&tmpl, "{{ messages[0]['content'] }}").unwrap();
    let o =
        infer(&["run", "-m", dir.to_str().unwrap(), "-p", "hi", "--chat", "--chat-template", tmpl.to_str().unwrap()]);
    assert!(o.status.success() && !stderr(&o).contains("note:"), "{}", stderr(&o));
}

#[test]
fn help_names_each_commands_default_model() {
    for cmd in ["run", "chat", "bench", "info"] {
        let o = infer(&[cmd, "--help"]);
        assert!(stdout(&o).contains("Gemma 3 270M"), "{cmd}: {}", stdout(&o));
    }
    for cmd in ["speak", "voice"] {
        let o = infer(&[cmd, "--help"]);
        let out = stdout(&o);
        assert!(out.contains("no default speech model") && !out.contains("Gemma"), "{cmd}: {out}");
    }
}

/// `infer plugins --json` run in `cwd` with no `--config` / `$INFER_CONFIG` and `xdg` as the
/// user's config folder.
fn plugins_in(cwd: &Path, xdg: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_infer"))
        .args(["plugins", "--json"])
        .args(extra)
        .current_dir(cwd)
        .env_remove("INFER_CONFIG")
        .env("XDG_CONFIG_HOME", xdg)
        .output()
        .unwrap()
}

#[test]
fn plugins_says_which_config_file_it_read() {
    let home = tempfile::tempdir().unwrap();
    let user_cfg = home.path().join("infer/plugins.toml");
    std::fs::create_dir_all(user_cfg.parent().unwrap()).unwrap();
    std::fs::write(&user_cfg, "").unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let o = plugins_in(elsewhere.path(), home.path(), &[]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["config"], user_cfg.display().to_string());
    let o =
        Command::new(env!("CARGO_BIN_EXE_infer")).args(["--config", user_cfg.to_str().unwrap(), "plugins"]).output();
    assert!(stdout(&o.unwrap()).contains(&format!("config: {}", user_cfg.display())));
}

/// A downloaded folder that ships a plugins.toml and a library: running infer inside it loads
/// nothing of it (the library's constructors would run at dlopen, before any check).
#[test]
fn a_plugins_toml_in_the_working_directory_is_not_read() {
    let repo = tempfile::tempdir().unwrap();
    let lib = plugin_library("infer_example_bigram");
    std::fs::write(repo.path().join("plugins.toml"), format!("[[plugin]]\npath = {lib:?}\n")).unwrap();
    let inner = repo.path().join("sub");
    std::fs::create_dir(&inner).unwrap();
    let no_home = tempfile::tempdir().unwrap();
    for cwd in [repo.path(), inner.as_path()] {
        let o = plugins_in(cwd, no_home.path(), &["-v"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        assert_eq!(v["config"], serde_json::Value::Null, "{v}");
        assert!(!stdout(&o).contains("bigram"), "the working directory's library was loaded: {v}");
        let err = stderr(&o);
        assert!(err.contains("not read: ") && err.contains("plugins.toml") && err.contains("--config"), "{err}");
        assert!(!err.contains("loaded plugin library"), "{err}");
    }
    // Named, it is read, and -v names the library it loaded.
    let cfg = repo.path().join("plugins.toml");
    let o = Command::new(env!("CARGO_BIN_EXE_infer"))
        .args(["-v", "--config", cfg.to_str().unwrap(), "plugins", "--json"])
        .output()
        .unwrap();
    assert!(stdout(&o).contains("bigram"), "{}", stdout(&o));
    assert!(stderr(&o).contains(&format!("infer: loaded plugin library {}", lib.display())), "{}", stderr(&o));
}

/// The user's config file is read only while nobody else may change it.
#[test]
fn a_discovered_config_others_may_write_is_refused_with_one_line() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("infer/plugins.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::set_permissions(cfg.parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(&cfg, format!("[[plugin]]\npath = {:?}\n", plugin_library("infer_example_bigram"))).unwrap();
    let cwd = tempfile::tempdir().unwrap();
    for mode in [0o666, 0o664] {
        std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(mode)).unwrap();
        let o = plugins_in(cwd.path(), home.path(), &[]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "mode {mode:o}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.starts_with("error: ") && err.contains("not trusted") && err.contains("chmod go-w"), "{err}");
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    }
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = plugins_in(cwd.path(), home.path(), &[]);
    assert!(o.status.success() && stdout(&o).contains("bigram"), "{}", stderr(&o));
}

#[test]
fn plugins_lists_builtin_and_library_entries() {
    let o = infer(&["plugins"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("candle") && out.contains("qwen3") && out.contains("built in"), "{out}");

    let dir = tempfile::tempdir().unwrap();
    let lib = plugin_library("infer_example_bigram");
    let cfg = dir.path().join("plugins.toml");
    std::fs::write(&cfg, format!("[[plugin]]\npath = {:?}\n", lib)).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_infer"))
        .args(["--config", cfg.to_str().unwrap(), "plugins", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let bigram = v["models"].as_array().unwrap().iter().find(|m| m["name"] == "bigram").expect("bigram listed");
    assert_eq!(bigram["origin"], lib.display().to_string());
    let candle = v["backends"].as_array().unwrap().iter().find(|m| m["name"] == "candle").expect("candle listed");
    assert_eq!(candle["origin"], "built in");
}

/// Copies a fixture checkpoint into a temp dir so a test can break it.
fn broken_copy(src: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dst = tmp.path().join("model");
    std::fs::create_dir(&dst).unwrap();
    for entry in std::fs::read_dir(fixture(src)).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dst.join(p.file_name().unwrap())).unwrap();
    }
    (tmp, dst)
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let path = dir.join("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    f(v.as_object_mut().unwrap());
    std::fs::write(&path, v.to_string()).unwrap();
}

fn assert_clean_error(args: &[&str], needles: &[&str]) {
    Infer::new(env!("CARGO_BIN_EXE_infer")).assert_clean_error(args, needles)
}

fn run_args(dir: &Path) -> Vec<String> {
    ["run", "--model", dir.to_str().unwrap(), "--prompt", "hello", "--max-tokens", "2"].map(String::from).to_vec()
}

fn check(dir: &Path, needles: &[&str]) {
    let args = run_args(dir);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_clean_error(&args, needles);
}

#[test]
fn bad_checkpoints_give_one_line_errors() {
    check(Path::new("/nonexistent/model"), &["/nonexistent/model", "does not exist"]);

    let (_t, d) = broken_copy("qwen3/gqa");
    std::fs::remove_file(d.join("config.json")).unwrap();
    check(&d, &["config.json", "not found"]);

    let (_t, d) = broken_copy("qwen3/gqa");
    edit_config(&d, |c| {
        c.remove("hidden_size");
    });
    check(&d, &["config.json", "missing field hidden_size"]);

    let (_t, d) = broken_copy("qwen3/gqa");
    edit_config(&d, |c| {
        c.insert("num_hidden_layers".into(), "two".into());
    });
    check(&d, &["config.json", "invalid type", "expected usize"]);

    let (_t, d) = broken_copy("qwen3/gqa");
    edit_config(&d, |c| {
        c.insert("model_type".into(), "mamba9".into());
    });
    check(&d, &["model_type `mamba9`", "qwen3"]);

    let (_t, d) = broken_copy("qwen3/gqa");
    std::fs::remove_file(d.join("tokenizer.json")).unwrap();
    check(&d, &["tokenizer.json", "not found"]);

    let (_t, d) = broken_copy("qwen3/gqa");
    let st = d.join("model.safetensors");
    let len = std::fs::metadata(&st).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&st).unwrap().set_len(len / 2).unwrap();
    check(&d, &["model.safetensors", "truncated"]);

    let (_t, d) = broken_copy("qwen3/gqa");
    std::fs::write(d.join("model.safetensors"), b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all").unwrap();
    check(&d, &["model.safetensors", "not a valid safetensors file"]);

    let (_t, d) = broken_copy("qwen3/gqa");
    edit_config(&d, |c| {
        c.insert("hidden_size".into(), 96.into());
    });
    check(&d, &["model.safetensors", "has shape"]);
}

#[test]
fn bad_requests_give_one_line_errors() {
    let dir = fixture("qwen3/gqa");
    let m = dir.to_str().unwrap();
    assert_clean_error(&["run", "-m", m, "-p", "hi", "--backend", "tpu"], &["unknown backend `tpu`", "candle"]);
    assert_clean_error(
        &["run", "-m", m, "-p", "hi", "--backend", "metal"],
        &["Metal needs macOS on Apple silicon", "--backend mlx --device cpu"],
    );
    assert_clean_error(&["run", "-m", m, "--prompt-tokens", "1,99999"], &["99999", "outside the vocabulary"]);
    assert_clean_error(&["run", "-m", m, "-p", ""], &["empty prompt"]);
    assert_clean_error(&["run", "-m", m, "-p", "hi", "--dtype", "f64"], &["--dtype f64"]);
    assert_clean_error(&["run", "-m", m, "-p", "hi", "--kv-dtype", "u8"], &["--kv-dtype u8"]);
    assert_clean_error(&["run", "-m", m], &["--prompt"]);
}

/// `--threads` (before or after the command) sets the backends' thread count, which the bench
/// result reports; 0 is refused.
#[test]
fn threads_flag_sets_the_backend_thread_count() {
    let dir = fixture("qwen3/gqa");
    let m = dir.to_str().unwrap();
    for (args, threads) in
        [(vec!["--threads", "1", "bench", "-m", m], 1), (vec!["bench", "-m", m, "--threads", "3"], 3)]
    {
        let mut args = args;
        args.extend(["--prompt-tokens", "4", "--gen-tokens", "2", "--runs", "1", "--json"]);
        let o = infer(&args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        let device = v["device"].as_str().unwrap();
        assert!(device.starts_with(&format!("cpu ({threads} threads")), "{args:?}: device {device:?}");
    }
    assert_clean_error(&["run", "-m", m, "-p", "hi", "--threads", "0"], &["--threads"]);
}

/// A small GGUF written with candle's writer: `general.architecture = arch`, one Q8_0 tensor.
fn write_gguf(path: &Path, arch: &str) {
    use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
    let t = candle_core::Tensor::arange(0f32, 1024.0, &candle_core::Device::Cpu).unwrap().reshape((32, 32)).unwrap();
    let q = QTensor::quantize(&t, GgmlDType::Q8_0).unwrap();
    let arch = gguf_file::Value::String(arch.into());
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &[("general.architecture", &arch)], &[("token_embd.weight", &q)]).unwrap();
}

#[test]
fn bad_gguf_files_give_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |p: &Path, needles: &[&str]| {
        assert_clean_error(&["run", "--model", p.to_str().unwrap(), "--prompt", "hi"], needles);
    };

    let bad_magic = tmp.path().join("bad-magic.gguf");
    std::fs::write(&bad_magic, b"GGML\x03\x00\x00\x00 definitely not gguf").unwrap();
    run(&bad_magic, &["bad-magic.gguf", "not a GGUF file (bad magic)"]);

    let unknown = tmp.path().join("unknown-arch.gguf");
    write_gguf(&unknown, "mamba9");
    run(&unknown, &["model_type `mamba9`", "gemma3", "qwen2"]);

    let truncated = tmp.path().join("truncated.gguf");
    write_gguf(&truncated, "qwen2");
    let len = std::fs::metadata(&truncated).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&truncated).unwrap().set_len(len - 500).unwrap();
    run(&truncated, &["truncated.gguf", "token_embd.weight", "truncated"]);

    // Patch the tensor's GGML type to 20 (IQ4_NL), which is not supported.
    let exotic = tmp.path().join("iq4.gguf");
    write_gguf(&exotic, "qwen2");
    let mut bytes = std::fs::read(&exotic).unwrap();
    let name = b"token_embd.weight";
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len() + 4 + 16;
    bytes[at..at + 4].copy_from_slice(&20u32.to_le_bytes());
    std::fs::write(&exotic, bytes).unwrap();
    run(&exotic, &["iq4.gguf", "unsupported tensor quantization type"]);
}

#[test]
fn context_overflow_and_bad_templates_give_one_line_errors() {
    let (_t, d) = broken_copy("qwen3/gqa");
    edit_config(&d, |c| {
        c.insert("max_position_embeddings".into(), 4.into());
    });
    let m = d.to_str().unwrap();
    assert_clean_error(&["run", "-m", m, "--prompt-tokens", "1,2,3,4,5,6"], &["exceeds the model's context of 4"]);

    let (_t, d) = broken_copy("qwen3/gqa");
    let cfg = d.join("tokenizer_config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    v["chat_template"] = "{{ raise_exception('this template refuses') }}".into();
    std::fs::write(&cfg, v.to_string()).unwrap();
    assert_clean_error(
        &["run", "-m", d.to_str().unwrap(), "-p", "hi", "--chat"],
        &["chat template", "this template refuses"],
    );
}

/// Issue 3's memory bound: the GGUF's quantized weights are computed on in their mapped pages,
/// so a Gemma 3 270M run stays within the file size + 200 MB (measured: file + ~115 MB) — on every
/// kernel path the CPU can take (`INFER_GGML_ISA` caps it), and with the libtorch plugin library
/// configured: declared `backends = ["tch"]`, it is not loaded by a candle run (loaded, it alone
/// added ~110 MB: issue 12).
#[test]
fn real_gemma_peak_memory_is_file_size_plus_200_mb() {
    let gguf = infer_tests::models_dir().join("gemma-3-270m-q4_k_m.gguf");
    assert!(gguf.exists(), "{} is missing: fetch the real models with tools/models/fetch.sh", gguf.display());
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("plugins.toml");
    let tch = infer_tests::profile_dir().join(format!(
        "{}infer_plugin_tch{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ));
    std::fs::write(&config, format!("[[plugin]]\npath = {tch:?}\noptional = true\nbackends = [\"tch\"]\n")).unwrap();
    let file_mb = std::fs::metadata(&gguf).unwrap().len() as f64 / 1e6;
    for isa in ["", "avx2", "scalar"] {
        let o = Command::new(env!("CARGO_BIN_EXE_infer"))
            .args(["bench", "--model", gguf.to_str().unwrap(), "--prompt-tokens", "64", "--gen-tokens", "8"])
            .args(["--runs", "1", "--json"])
            .env("INFER_CONFIG", &config)
            .env("INFER_GGML_ISA", isa)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        let peak_mb = v["peak_rss_mb"].as_f64().unwrap();
        assert!(
            peak_mb <= file_mb + 200.0,
            "INFER_GGML_ISA={isa:?}: peak RSS {peak_mb:.0} MB for a {file_mb:.0} MB file"
        );
    }
}

/// `--json-schema`, `--regex` and `--grammar` constrain `run` on the real Qwen2.5-Coder GGUF
/// (sampled, so the constraint and not greedy luck makes the output match); a bad constraint
/// file, or two at once, is one clear error.
#[test]
fn run_constrains_its_output_to_a_schema_a_regex_or_a_grammar() {
    let gguf = infer_tests::real_model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    let m = gguf.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("point.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
            "required": ["x", "y"], "additionalProperties": false}"#,
    )
    .unwrap();
    let grammar = dir.path().join("answer.lark");
    std::fs::write(&grammar, "start: (\"yes\" | \"no\") \", because \" /[a-z ]{1,30}/ \".\"\n").unwrap();
    let text = |extra: &[&str]| {
        let mut args =
            vec!["run", "-m", m, "--chat", "--temperature", "1", "--seed", "5", "--max-tokens", "60", "--json"];
        args.extend_from_slice(extra);
        let o = infer(&args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        v["text"].as_str().unwrap().to_string()
    };
    let point: serde_json::Value =
        serde_json::from_str(&text(&["-p", "A point in the plane.", "--json-schema", schema.to_str().unwrap()]))
            .unwrap();
    assert!(point["x"].is_i64() && point["y"].is_i64() && point.as_object().unwrap().len() == 2, "{point}");
    let date = text(&["-p", "A date.", "--regex", "20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]"]);
    assert!(date.len() == 10 && date.starts_with("20") && date.as_bytes()[4] == b'-', "{date:?}");
    let answer = text(&["-p", "Is water wet?", "--grammar", grammar.to_str().unwrap()]);
    assert!(
        (answer.starts_with("yes, because ") || answer.starts_with("no, because ")) && answer.ends_with('.'),
        "{answer:?}"
    );
    let not_json = dir.path().join("bad.json");
    std::fs::write(&not_json, "{").unwrap();
    assert_clean_error(&["run", "-m", m, "-p", "hi", "--json-schema", not_json.to_str().unwrap()], &["is not JSON"]);
    assert_clean_error(&["run", "-m", m, "-p", "hi", "--regex", "(["], &["regular expression does not compile"]);
    // Two constraints: clap's usage error.
    let o = infer(&["run", "-m", m, "-p", "hi", "--regex", "a", "--grammar", "g.lark"]);
    assert!(!o.status.success() && stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
}
