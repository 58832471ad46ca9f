//! The out-of-tree architecture path: `examples/olmo2-plugin`, a crate on the SDK and the shared
//! layers alone, built as a library and loaded by configuration, against transformers'
//! `Olmo2ForCausalLM` on tiny checkpoints it wrote (tests/fixtures/olmo2, make_olmo2.py), on every
//! backend setup.
//!
//! Tolerance (f32 compute): 1e-4 absolute on logits, as for the in-tree LLMs (llm_parity.rs). The
//! fixture's script checks that the conventions OLMo 2 changes matter: Llama's norm placement moves
//! these logits by 6.6, per-head q/k norm by 1.8, no q/k norm by 7.3. The bf16 checkpoint's goldens
//! are computed in f32 over its bf16 weights, which f32 compute reproduces (widening is exact).

use infer_core::{DType, GenerateConfig, LoadConfig, TextModel};
use infer_tests::{fixture, golden, max_abs_diff, plugin_library, Setup};

const F32_TOL: f32 = 1e-4;
const CHECKPOINTS: [&str; 2] = ["olmo2/base", "olmo2/bf16"];

#[test]
fn olmo2_plugin_matches_transformers() {
    for setup in Setup::all() {
        let mut registry = setup.registry().unwrap();
        registry.load_library(&plugin_library("infer_example_olmo2")).unwrap();
        let cfg = LoadConfig { backend: Some(setup.backend().into()), dtype: Some(DType::F32), ..Default::default() };
        for name in CHECKPOINTS {
            let dir = fixture(name);
            let model = registry.load_model(&dir, &cfg).unwrap();
            assert_eq!(model.model_type(), "olmo2");
            for case in golden(&dir).cases {
                let gen = GenerateConfig { max_tokens: case.greedy.len(), ignore_eos: true, ..Default::default() };
                let ids: Vec<u32> = model.generate_ids(&case.ids, &gen).unwrap().map(|t| t.unwrap().id).collect();
                assert_eq!(ids, case.greedy, "{setup:?} {name}: greedy ids for {:?}", case.prompt);
                let logits = last_logits(&*model, &case.ids, case.greedy[0]);
                let diff = max_abs_diff(&logits, &case.last_logits);
                assert!(diff <= F32_TOL, "{setup:?} {name}: logits differ by {diff} for {:?}", case.prompt);
            }
        }
    }
}

/// Logits of the last prompt position: the distribution the model predicts for the token after
/// the whole prompt (any token will do as that continuation; the first greedy one is at hand).
fn last_logits(model: &dyn TextModel, ids: &[u32], next: u32) -> Vec<f32> {
    model.continuation_logits(ids, &[next]).unwrap().pop().unwrap()
}
