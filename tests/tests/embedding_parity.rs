//! Text-embedding parity with sentence-transformers on the tiny random Qwen3-Embedding
//! checkpoint (tests/fixtures/qwen3-embedding: `tiny/` in the pre-v5 module format the real
//! checkpoint has, `st6/` as sentence-transformers 6.2 saves it), on every backend setup: token
//! ids equal, vectors within tolerance, singly and as one batch.
//!
//! Tolerance (f32): 1e-4 absolute on unit vectors whose components lie in about ±0.5 (measured:
//! 3.6e-7 single, 5.6e-7 batched on candle; 4.1e-7 and 8.0e-7 on tch). The reference's own batch
//! (left-padded) moves by 6e-7 from its single runs; pooling the first token instead of the last
//! moves components by 0.47, skipping the normalisation by 3.

use std::path::Path;

use infer_core::embed::{EmbedOptions, Embeddings, TextEmbedder};
use infer_core::{DType, LoadConfig};
use infer_tests::{fixture, max_abs_diff, Setup};
use serde::Deserialize;

const FOLDERS: [&str; 2] = ["qwen3-embedding/tiny", "qwen3-embedding/st6"];
const F32_TOL: f32 = 1e-4;
/// bf16 keeps 8 significant bits (relative step 0.4%): measured 1.0e-2 on candle and 8.9e-3 on
/// tch on unit vectors whose components reach 0.5.
const BF16_TOL: f32 = 0.02;

#[derive(Deserialize)]
struct EmbedGolden {
    pooling: String,
    normalize: bool,
    cases: Vec<EmbedCase>,
    batch: EmbedBatch,
}

#[derive(Deserialize)]
struct EmbedCase {
    text: String,
    prompt_name: Option<String>,
    input: String,
    ids: Vec<u32>,
    embedding: Vec<f32>,
}

#[derive(Deserialize)]
struct EmbedBatch {
    inputs: Vec<String>,
    embeddings: Vec<Vec<f32>>,
}

fn read_golden(dir: &Path) -> EmbedGolden {
    let text = std::fs::read_to_string(dir.join("golden.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn load(setup: Setup, dir: &Path, dtype: DType) -> Box<dyn TextEmbedder> {
    let registry = setup.registry().unwrap();
    let cfg = LoadConfig { backend: Some(setup.backend().into()), dtype: Some(dtype), ..Default::default() };
    registry.load_embedder(dir, &cfg).unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

fn options(prompt_name: &Option<String>) -> EmbedOptions {
    prompt_name.as_ref().map_or_else(EmbedOptions::default, EmbedOptions::with_prompt)
}

/// Checks one vector against the reference: max |Δ| within `tol` and the direction kept.
fn check(what: &str, ours: &[f32], want: &[f32], tol: f32) -> f32 {
    let diff = max_abs_diff(ours, want);
    assert!(diff <= tol, "{what}: embedding differs by {diff} (tolerance {tol})");
    let cos = cosine(ours, want);
    assert!(cos >= 1.0 - f64::from(tol), "{what}: cosine {cos}");
    diff
}

#[test]
fn fixtures_say_last_token_pooling_and_normalize() {
    for folder in FOLDERS {
        let g = read_golden(&fixture(folder));
        assert_eq!((g.pooling.as_str(), g.normalize), ("lasttoken", true), "{folder}");
    }
}

#[test]
fn ids_match_the_reference_tokenizer() {
    for folder in FOLDERS {
        let dir = fixture(folder);
        let tok = infer_core::HfTokenizer::from_dir(&dir).unwrap();
        for case in read_golden(&dir).cases {
            let ids = tok.inner().encode(case.input.as_str(), true).unwrap().get_ids().to_vec();
            assert_eq!(ids, case.ids, "{folder}: ids of {:?}", case.text);
        }
    }
}

#[test]
fn single_texts_match_sentence_transformers() {
    for setup in Setup::all() {
        for folder in FOLDERS {
            let dir = fixture(folder);
            let model = load(setup, &dir, DType::F32);
            assert_eq!(model.dimension(), 64);
            assert_eq!(model.prompt_names(), ["document", "query"]);
            let mut worst = 0f32;
            for case in read_golden(&dir).cases {
                let out = model.embed(&[case.text.as_str()], &options(&case.prompt_name)).unwrap();
                assert_eq!((out.len(), out.dimension), (1, 64));
                // The model read exactly the reference's tokens (prompt and <|endoftext|> included).
                assert_eq!(out.prompt_tokens, case.ids.len(), "{setup:?} {folder}: tokens of {:?}", case.text);
                let what = format!("{setup:?} {folder} {:?}", case.text);
                worst = worst.max(check(&what, out.vector(0), &case.embedding, F32_TOL));
            }
            eprintln!("{} {folder}: single max |diff| {worst:e}", setup.name());
        }
    }
}

#[test]
fn a_batch_runs_in_one_call_and_matches() {
    for setup in Setup::all() {
        for folder in FOLDERS {
            let dir = fixture(folder);
            let model = load(setup, &dir, DType::F32);
            let g = read_golden(&dir);
            // The batch's inputs carry their prompts already.
            let texts: Vec<&str> = g.batch.inputs.iter().map(String::as_str).collect();
            let out: Embeddings = model.embed(&texts, &EmbedOptions::default()).unwrap();
            assert_eq!(out.len(), texts.len());
            let tokens: usize = g.cases.iter().map(|c| c.ids.len()).sum();
            assert_eq!(out.prompt_tokens, tokens, "{setup:?} {folder}");
            let mut worst = 0f32;
            for (i, want) in g.batch.embeddings.iter().enumerate() {
                let what = format!("{setup:?} {folder} batch row {i}");
                worst = worst.max(check(&what, out.vector(i), want, F32_TOL));
            }
            eprintln!("{} {folder}: batch max |diff| {worst:e}", setup.name());
        }
    }
}

#[test]
fn truncated_vectors_are_the_renormalised_prefix() {
    for setup in Setup::all() {
        let dir = fixture(FOLDERS[0]);
        let model = load(setup, &dir, DType::F32);
        let case = &read_golden(&dir).cases[0];
        let opts = EmbedOptions { dimensions: 16, ..Default::default() };
        let out = model.embed(&[case.text.as_str()], &opts).unwrap();
        assert_eq!(out.dimension, 16);
        let norm = case.embedding[..16].iter().map(|x| x * x).sum::<f32>().sqrt();
        let want: Vec<f32> = case.embedding[..16].iter().map(|x| x / norm).collect();
        check(&format!("{setup:?} 16 dimensions"), out.vector(0), &want, F32_TOL);
    }
}

#[test]
fn bf16_stays_within_tolerance() {
    for setup in Setup::all() {
        for folder in FOLDERS {
            let dir = fixture(folder);
            let model = load(setup, &dir, DType::BF16);
            let mut worst = 0f32;
            for case in read_golden(&dir).cases {
                let out = model.embed(&[case.text.as_str()], &options(&case.prompt_name)).unwrap();
                let what = format!("{setup:?} bf16 {folder} {:?}", case.text);
                worst = worst.max(check(&what, out.vector(0), &case.embedding, BF16_TOL));
            }
            eprintln!("{} {folder}: bf16 max |diff| {worst:e}", setup.name());
        }
    }
}

#[test]
fn bad_requests_are_clear_errors() {
    let setup = Setup::all()[0];
    let model = load(setup, &fixture(FOLDERS[0]), DType::F32);
    let err = |texts: &[&str], opts: EmbedOptions| model.embed(texts, &opts).unwrap_err().to_string();
    let unknown = err(&["a"], EmbedOptions::with_prompt("passage"));
    assert!(unknown.contains("unknown prompt name `passage`") && unknown.contains("document, query"), "{unknown}");
    assert!(err(&[], EmbedOptions::default()).contains("no texts"));
    assert!(err(&["a"], EmbedOptions { dimensions: 65, ..Default::default() }).contains("65 dimensions"));
}
