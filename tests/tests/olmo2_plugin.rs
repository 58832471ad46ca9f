//! The out-of-tree architecture path: `examples/olmo2-plugin`, a crate on the SDK and the shared
//! layers alone, built as a library and loaded by configuration, against transformers'
//! `Olmo2ForCausalLM` on tiny checkpoints it wrote (tests/fixtures/olmo2, make_olmo2.py), on every
//! backend setup.
//!
//! Tolerance (f32 compute): 1e-4 absolute on logits, as for the in-tree LLMs (llm_parity.rs). The
//! fixture's script checks that the conventions OLMo 2 changes matter: Llama's norm placement moves
//! these logits by 6.6, per-head q/k norm by 1.8, no q/k norm by 7.3. The bf16 checkpoint's goldens
//! are computed in f32 over its bf16 weights, which f32 compute reproduces (widening is exact).

use infer_core::{DType, LoadConfig};
use infer_parity::{check_text_model, Golden};
use infer_tests::{fixture, plugin_library, Setup};

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
            // The harness a plugin author uses: greedy ids equal, last logits within the tolerance.
            let golden = Golden::read(&dir).unwrap();
            let report =
                check_text_model(&*model, &golden, F32_TOL).unwrap_or_else(|e| panic!("{setup:?} {name}: {e}"));
            assert_eq!(report.cases, golden.cases.len());
        }
    }
}
