//! `infer embed` end to end through the binary, on the tiny Qwen3-Embedding fixture
//! (tools/fixtures/make_qwen3_embedding.py): the JSON vectors sentence-transformers computed,
//! a prompt by name, and one clear error line for each kind of bad input.

use infer_tests::cli::{stderr, stdout, Infer};
use infer_tests::{fixture, max_abs_diff, Setup};
use serde::Deserialize;

#[derive(Deserialize)]
struct Golden {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    prompt_name: Option<String>,
    embedding: Vec<f32>,
}

#[derive(Deserialize)]
struct Printed {
    architecture: String,
    dimension: usize,
    prompt_tokens: usize,
    embeddings: Vec<Vec<f32>>,
}

fn infer() -> Infer {
    Setup::CandleBuiltIn.mark_ran();
    Infer::new(env!("CARGO_BIN_EXE_infer"))
}

fn golden() -> Golden {
    serde_json::from_str(&std::fs::read_to_string(fixture("qwen3-embedding/tiny/golden.json")).unwrap()).unwrap()
}

fn embed(args: &[&str]) -> Printed {
    let dir = fixture("qwen3-embedding/tiny");
    let mut all = vec!["embed", "--backend", "candle", "--model", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let o = infer().run(&all);
    assert!(o.status.success(), "{all:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("stdout is not the JSON expected ({e}): {}", stdout(&o)))
}

#[test]
fn texts_print_the_reference_vectors_in_order() {
    let g = golden();
    let plain: Vec<&Case> = g.cases.iter().filter(|c| c.prompt_name.is_none() && !c.text.is_empty()).take(2).collect();
    let out = embed(&["--text", &plain[0].text, "--text", &plain[1].text]);
    assert_eq!((out.architecture.as_str(), out.dimension, out.embeddings.len()), ("qwen3", 64, 2));
    assert!(out.prompt_tokens > 0);
    for (ours, case) in out.embeddings.iter().zip(&plain) {
        let diff = max_abs_diff(ours, &case.embedding);
        assert!(diff <= 1e-4, "{:?}: differs by {diff}", case.text);
    }
}

#[test]
fn a_prompt_name_prefixes_its_instruction() {
    let g = golden();
    let case = g.cases.iter().find(|c| c.prompt_name.as_deref() == Some("query")).unwrap();
    let out = embed(&["--prompt-name", "query", "--text", &case.text]);
    let diff = max_abs_diff(&out.embeddings[0], &case.embedding);
    assert!(diff <= 1e-4, "query prompt: differs by {diff}");
}

#[test]
fn bad_input_is_one_clear_line() {
    let dir = fixture("qwen3-embedding/tiny");
    let dir = dir.to_str().unwrap();
    let infer = infer();
    let base = ["embed", "--backend", "candle", "--model"];
    let with = |rest: &[&'static str], model: &str| -> Vec<String> {
        base.iter()
            .map(|s| s.to_string())
            .chain([model.to_string()])
            .chain(rest.iter().map(|s| s.to_string()))
            .collect()
    };
    let check = |args: Vec<String>, needles: &[&str]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        infer.assert_clean_error(&args, needles);
    };
    check(with(&["--text", "a"], "/no/such/embedding/dir"), &["/no/such/embedding/dir"]);
    check(with(&["--prompt-name", "passage", "--text", "a"], dir), &["unknown prompt name `passage`", "query"]);
    check(with(&[], dir), &["no --text given"]);
    check(with(&["--text", "a", "--text", ""], dir), &["--text number 2 is empty"]);
    check(with(&["--dimensions", "65", "--text", "a"], dir), &["65 dimensions"]);
    infer.assert_clean_error(&["embed", "--text", "a"], &["no --model given"]);
}
