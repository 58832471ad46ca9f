//! The `infer` binary with the tch backend loaded from its plugin library by configuration:
//! greedy tokens equal the transformers goldens on every LLM fixture (with `--backend cuda` too
//! where a GPU is; where none is, `--backend cuda` fails with one clear line), and a tch library
//! whose libtorch is gone is one clear error (or, marked optional, a skipped plugin while candle
//! keeps working).
//!
//! The default `infer` binary does not link libtorch: only the plugin library does, through its
//! rpath.

use std::path::{Path, PathBuf};
use std::process::Output;

use infer_tests::cli::{stderr, Infer};
use infer_tests::{fixture, golden, plugin_library, LLM_FIXTURES};

/// A plugins.toml in `dir` that adds `lib` to the built-in plugins.
fn config_with(dir: &Path, lib: &Path, optional: bool) -> PathBuf {
    let path = dir.join("plugins.toml");
    let text = format!("[[plugin]]\npath = {:?}\noptional = {optional}\n", lib.to_str().unwrap());
    std::fs::write(&path, text).unwrap();
    path
}

fn infer(config: &Path, args: &[&str]) -> Output {
    Infer::new(env!("CARGO_BIN_EXE_infer")).with_config(config).run(args)
}

fn run_json(config: &Path, dir: &Path, ids: &[u32], n: usize, backend: &str) -> Output {
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    let n = n.to_string();
    let args = [
        "run",
        "--model",
        dir.to_str().unwrap(),
        "--backend",
        backend,
        "--prompt-tokens",
        &ids.join(","),
        "--max-tokens",
        &n,
        "--ignore-eos",
        "--temperature",
        "0",
        "--json",
    ];
    infer(config, &args)
}

fn tokens(o: &Output) -> Vec<u32> {
    let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
    v["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

/// Greedy ids of `infer run --backend <backend>` equal the goldens on every LLM fixture.
fn check_goldens(config: &Path, backend: &str) {
    for name in LLM_FIXTURES {
        let dir = fixture(name);
        for case in golden(&dir).cases {
            let o = run_json(config, &dir, &case.ids, case.greedy.len(), backend);
            assert!(o.status.success(), "{name} on {backend}: {}", stderr(&o));
            assert_eq!(tokens(&o), case.greedy, "{name} on {backend}: greedy ids for {:?}", case.prompt);
        }
    }
}

#[test]
fn run_backend_tch_matches_the_goldens_on_every_llm_fixture() {
    let tmp = tempfile::tempdir().unwrap();
    let config = config_with(tmp.path(), &plugin_library("infer_plugin_tch"), false);
    check_goldens(&config, "tch");
}

/// Where a GPU and a CUDA build are present, `--backend cuda` must match the goldens too;
/// elsewhere it must fail with one line saying why.
#[test]
fn plugins_lists_tch_and_cuda_matches_the_goldens_or_is_one_clear_line() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = plugin_library("infer_plugin_tch");
    let config = config_with(tmp.path(), &lib, false);
    let o = infer(&config, &["plugins", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
    let tch = v["backends"].as_array().unwrap().iter().find(|b| b["name"] == "tch").expect("tch listed");
    assert!(tch.to_string().contains("libinfer_plugin_tch"), "{tch}");

    let dir = fixture("qwen3/gqa");
    let o = run_json(&config, &dir, &[1, 2, 3], 2, "cuda");
    // tools/gpu_check.sh sets INFER_TEST_CUDA=1: there a missing GPU is a failure, not a skip.
    let required = std::env::var("INFER_TEST_CUDA").as_deref() == Ok("1");
    assert!(o.status.success() || !required, "INFER_TEST_CUDA=1 but --backend cuda failed: {}", stderr(&o));
    if o.status.success() {
        eprintln!("a CUDA device is present: checking --backend cuda against the goldens");
        check_goldens(&config, "cuda");
        return;
    }
    let e = stderr(&o);
    assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    assert!(e.contains("no CUDA device") && !e.contains("panick"), "{e}");
}

/// A copy of the tch library whose rpath points nowhere: the situation of a machine where the
/// libtorch it was built against is absent (nothing else on this machine would find libtorch:
/// it is in no system directory and LD_LIBRARY_PATH is cleared).
fn library_without_libtorch(dir: &Path) -> PathBuf {
    let lib = plugin_library("infer_plugin_tch");
    let mut bytes = std::fs::read(&lib).unwrap();
    // The libtorch the library was built against (tools/test.sh exports LIBTORCH for the build).
    let libtorch = std::env::var("LIBTORCH").ok().or(option_env!("LIBTORCH").map(String::from));
    let torch_lib = format!("{}/lib", libtorch.expect("LIBTORCH (printed by tools/setup_libtorch.sh)"));
    let needle = torch_lib.as_bytes();
    let fake: Vec<u8> =
        format!("/nonexistent-libtorch{}", "x".repeat(needle.len())).into_bytes()[..needle.len()].to_vec();
    let mut replaced = 0;
    let mut i = 0;
    while i + needle.len() <= bytes.len() {
        if &bytes[i..i + needle.len()] == needle {
            bytes[i..i + needle.len()].copy_from_slice(&fake);
            replaced += 1;
            i += needle.len();
        } else {
            i += 1;
        }
    }
    assert!(replaced > 0, "the rpath {torch_lib} was not found in {}", lib.display());
    let out = dir.join("libinfer_plugin_tch.so");
    std::fs::write(&out, bytes).unwrap();
    out
}

#[test]
fn a_missing_libtorch_is_one_clear_error_and_candle_keeps_working() {
    let tmp = tempfile::tempdir().unwrap();
    let broken = library_without_libtorch(tmp.path());

    // Named as required: the one-line loader error names the missing library.
    let required = tempfile::tempdir().unwrap();
    let config = config_with(required.path(), &broken, false);
    let o = infer(&config, &["plugins"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    assert!(e.contains("libinfer_plugin_tch.so") && e.contains("cannot open shared object file"), "{e}");
    assert!(e.contains("libtorch") || e.contains("libc10"), "names the missing libtorch library: {e}");

    // Named as optional: skipped with a warning, candle runs, asking for tch says why not.
    let optional = tempfile::tempdir().unwrap();
    let config = config_with(optional.path(), &broken, true);
    let dir = fixture("qwen3/gqa");
    let case = &golden(&dir).cases[0];
    let o = run_json(&config, &dir, &case.ids, case.greedy.len(), "candle");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(tokens(&o), case.greedy);
    let o = run_json(&config, &dir, &case.ids, 2, "tch");
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("unknown backend `tch`") && e.contains("cannot open shared object file"), "{e}");
}
