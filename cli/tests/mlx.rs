//! The `infer` binary with the MLX backend loaded from its plugin library by the repository's
//! own plugins.toml (which names target/release/libinfer_plugin_mlx.so, built there by
//! tools/setup_mlx.sh): greedy tokens equal the transformers goldens on every LLM fixture, and
//! `--backend metal` / `--device gpu` fail with one clear line where MLX has no Metal GPU.
//! Left out, with a line on stderr, only where the run does not cover the MLX setup
//! (`infer_tests::Setup::all`: never in CI, nor when `INFER_SETUPS` names `mlx`).

use std::process::Output;

use infer_tests::cli::{stderr, Infer};
use infer_tests::{fixture, golden, repo_root, Setup, LLM_FIXTURES};

fn infer(args: &[&str]) -> Output {
    Infer::new(env!("CARGO_BIN_EXE_infer")).with_config(&repo_root().join("plugins.toml")).run(args)
}

/// Whether this run covers MLX (a missing or stale library fails where it must, and is said
/// on stderr where it may be left out); recorded for tools/test.sh's summary when it does.
fn mlx_covered() -> bool {
    let covered = Setup::MlxLibrary.covered();
    if covered {
        Setup::MlxLibrary.mark_ran();
    }
    covered
}

fn run_json(dir: &str, ids: &[u32], n: usize, extra: &[&str]) -> Output {
    let ids = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let n = n.to_string();
    let mut args = vec!["run", "--model", dir, "--prompt-tokens", &ids, "--max-tokens", &n];
    args.extend(["--temperature", "0", "--ignore-eos", "--json"]);
    args.extend(extra);
    infer(&args)
}

fn tokens(o: &Output) -> Vec<u32> {
    let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
    v["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

#[test]
fn run_backend_mlx_matches_the_goldens_on_every_llm_fixture() {
    if !mlx_covered() {
        return;
    }
    for name in LLM_FIXTURES {
        let dir = fixture(name);
        for case in golden(&dir).cases {
            let o = run_json(dir.to_str().unwrap(), &case.ids, case.greedy.len(), &["--backend", "mlx"]);
            assert!(o.status.success(), "{name}: {}", stderr(&o));
            assert_eq!(tokens(&o), case.greedy, "{name}: greedy ids for {:?}", case.prompt);
        }
    }
}

#[test]
fn plugins_lists_mlx_and_metal_without_one_is_one_clear_line() {
    if !mlx_covered() {
        return;
    }
    let o = infer(&["plugins", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
    let mlx = v["backends"].as_array().unwrap().iter().find(|b| b["name"] == "mlx").expect("mlx listed");
    assert!(mlx.to_string().contains("libinfer_plugin_mlx"), "{mlx}");

    let dir = fixture("qwen3/gqa");
    let dir = dir.to_str().unwrap();
    // The CPU explicitly: the goldens' ids.
    let case = &golden(&fixture("qwen3/gqa")).cases[0];
    let o = run_json(dir, &case.ids, case.greedy.len(), &["--backend", "mlx", "--device", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(tokens(&o), case.greedy);
    for extra in [&["--backend", "metal"][..], &["--backend", "mlx", "--device", "gpu"][..]] {
        let o = run_json(dir, &[1, 2, 3], 2, extra);
        if o.status.success() {
            eprintln!("a Metal GPU is present: {extra:?} ran on it");
            continue;
        }
        let e = stderr(&o);
        assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
        assert!(e.contains("Metal needs macOS on Apple silicon") && e.contains("--device cpu"), "{e}");
        assert!(!e.contains("known:") && !e.contains("panick"), "{e}");
    }
}
