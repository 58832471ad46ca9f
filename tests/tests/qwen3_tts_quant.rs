//! Qwen3-TTS with the talker's and code predictor's linear weights quantized to Q8_0 at load
//! (`LoadConfig::quant`): synthesis runs and makes frames, its greedy codes follow the f32 run's
//! for as long as measured below, and a backend or model that cannot quantize says so.
//!
//! What agreement to expect: greedy decoding is autoregressive, so the first code that differs
//! changes every later frame; agreement is counted as the codes before the first difference.
//! The tiny fixtures' random weights make many near ties among their sub-code logits (the
//! goldens' `subcode_margins`, often below 1e-2), which 8-bit weights (a relative error of about
//! 0.4% per weight) flip early. So this test bounds what was measured here, with margin; it is
//! no estimate of the quality on trained weights (docs/models/qwen3-tts.md has the 0.6B figures).

use abi_stable::std_types::{RResult, RSlice, RStr, RVec};
use infer_core::audio::{CodebookSampling, RSome, SpeechOptions};
use infer_core::text::tokenizer::Tokenizer;
use infer_core::{
    Backend, BackendImpl, CancelToken, DType, DeviceInfo, FfiError, LoadConfig, MemoryStats, Op, Registry, TensorObj,
};
use infer_qwen3_tts::generator::{CodeGenerator, CodeRequest};
use infer_qwen3_tts::prompt::{self, InContext, PromptParts, SpeakerPrompt};
use infer_tests::{fixture, least, pearson};
use serde::Deserialize;

#[derive(Deserialize)]
struct Goldens {
    random_speaker: Vec<f32>,
    wav_speaker: Vec<f32>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    text: String,
    language: String,
    non_streaming: bool,
    speaker: Option<String>,
    ref_text: Option<String>,
    ref_codes: Option<Vec<Vec<u32>>>,
}

const FRAMES: usize = 23;
/// The least Pearson correlation of q8_0's logits with f32's on the same input (the prompt's
/// end for the talker, the first frame's codes forced for the code predictor), every case.
/// Measured (candle, x86): talker 0.99950, code predictor 0.99696 on each kernel path (AVX-512,
/// AVX2 and scalar alike: at these widths the products are a block or two of exact integer sums,
/// so the quantizer's rounding, the same on every path, is what moves them). The bounds allow
/// 4x and 3.3x that 1 - r; a quantizer that truncated instead of rounding (0.99955, 0.98389)
/// fails the code predictor's, where the agreement below still passed (154 codes).
const MIN_TALKER_R: f64 = 0.998;
const MIN_PREDICTOR_R: f64 = 0.99;

fn greedy() -> SpeechOptions {
    SpeechOptions {
        temperature: 0.0,
        repeat_penalty: 1.05,
        codebook_sampling: RSome(CodebookSampling { temperature: 0.0, top_k: 0, top_p: 1.0 }),
        max_frames: FRAMES,
        ..SpeechOptions::default()
    }
}

fn speaker(g: &Goldens, case: &Case) -> SpeakerPrompt {
    match case.speaker.as_deref() {
        None => SpeakerPrompt::None,
        Some("wav") => SpeakerPrompt::XVector(g.wav_speaker.clone()),
        Some(_) => SpeakerPrompt::XVector(g.random_speaker.clone()),
    }
}

/// Greedy codes of every golden case.
fn all_codes(generator: &CodeGenerator, g: &Goldens) -> Vec<Vec<Vec<u32>>> {
    g.cases
        .iter()
        .map(|case| {
            let req = CodeRequest {
                text: &case.text,
                language: Some(&case.language),
                speaker: speaker(g, case),
                in_context: case.ref_text.as_deref().map(|t| (t, case.ref_codes.clone().unwrap())),
                non_streaming: case.non_streaming,
            };
            generator.generate(&req, &greedy(), &CancelToken::new(), &mut |_| true).unwrap()
        })
        .collect()
}

/// The talker's logits at the end of `case`'s prompt, then the code predictor's for each code
/// of the first frame with that frame's codes forced to `frame` (the f32 run's): what the two
/// models compute on the same input, before greedy decoding parts them.
fn first_frame_logits(generator: &CodeGenerator, g: &Goldens, case: &Case, frame: &[u32]) -> Vec<Vec<f32>> {
    let t = &generator.cfg.talker_config;
    let in_context = case.ref_text.as_deref().map(|text| InContext {
        // The reference transcript as `CodeGenerator::generate` wraps it.
        ref_ids: generator.tokenizer.encode(&format!("<|im_start|>assistant\n{text}<|im_end|>\n"), false).unwrap(),
        ref_codes: case.ref_codes.clone().unwrap(),
    });
    let parts = PromptParts {
        text_ids: &generator.text_ids(&case.text).unwrap(),
        language_id: t.codec_language_id.get(&case.language).copied(),
        speaker: &speaker(g, case),
        in_context: in_context.as_ref(),
        non_streaming: case.non_streaming,
    };
    let prompt = prompt::build(&generator.cfg, &generator.talker, &generator.predictor, &parts).unwrap();
    let (hidden, logits) = generator.talker.forward(&prompt.prefill, &mut generator.talker.new_cache()).unwrap();
    let mut all = vec![logits];
    let first = generator.talker.codec_embed(&frame[..1]).unwrap();
    let mut cache = generator.predictor.new_cache();
    let mut forced = |group: usize, l: &mut [f32]| {
        all.push(l.to_vec());
        frame[group + 1]
    };
    generator.predictor.predict(&hidden, &first, &mut cache, &mut forced).unwrap();
    all
}

/// Codes (frame after frame) before the first that differs.
fn agreeing_prefix(a: &[Vec<u32>], b: &[Vec<u32>]) -> usize {
    a.iter().flatten().zip(b.iter().flatten()).take_while(|(x, y)| x == y).count()
}

#[test]
fn q8_0_codes_follow_f32_on_the_tiny_fixtures() {
    let backend = Registry::builtin().unwrap().backend(Some("candle"), None).unwrap();
    let (mut agreeing, mut total, mut differing_cases) = (0, 0, 0);
    let (mut talker_r, mut predictor_r) = (1f64, 1f64);
    for model in ["qwen3-tts/small", "qwen3-tts/mtp"] {
        let dir = fixture(model);
        let g: Goldens = serde_json::from_str(&std::fs::read_to_string(dir.join("goldens.json")).unwrap()).unwrap();
        let f32_gen = CodeGenerator::load(&dir, &backend, DType::F32, None).unwrap();
        let f32_codes = all_codes(&f32_gen, &g);
        let q8 = CodeGenerator::load(&dir, &backend, DType::F32, Some(DType::Q8_0)).unwrap();
        let q8_codes = all_codes(&q8, &g);
        for ((case, a), b) in g.cases.iter().zip(&f32_codes).zip(&q8_codes) {
            let what = format!("{model}/{}", case.name);
            // Once the codes part, EOS may come at another frame.
            assert!(!b.is_empty() && b.len() <= FRAMES, "{what}: q8_0 made {} frames", b.len());
            assert!(b.iter().all(|f| f.len() == 16), "{what}: 16 codes a frame");
            let n = agreeing_prefix(a, b);
            let all = a.len() * 16;
            eprintln!("{what}: q8_0 = f32 for the first {n} of {all} codes");
            agreeing += n;
            total += all;
            differing_cases += usize::from(n < all || a.len() != b.len());
            let (want, got) = (first_frame_logits(&f32_gen, &g, case, &a[0]), first_frame_logits(&q8, &g, case, &a[0]));
            let rs: Vec<f64> = want.iter().zip(&got).map(|(w, q)| pearson(q, w)).collect();
            eprintln!(
                "{what}: q8_0 logits' correlation with f32's: talker {:.6}, code predictor {:.6}",
                rs[0],
                least(rs[1..].iter().copied())
            );
            talker_r = least([talker_r, rs[0]]);
            predictor_r = least([predictor_r, least(rs[1..].iter().copied())]);
        }
    }
    eprintln!("q8_0 logits' least correlation with f32's: talker {talker_r:.6}, code predictor {predictor_r:.6}");
    eprintln!("q8_0 = f32 for the first {agreeing} of {total} codes ({differing_cases} cases part)");
    // Measured (candle, x86): 244 of 4016 codes on each kernel path (AVX-512, AVX2 and scalar give
    // the same codes), 0 to 82 a case, 11 of 12 cases agreeing on at least their first code.
    // Weights that quantized to garbage would agree on next to none (1 in 2048 by chance); half
    // the measured figure leaves room for other CPUs' kernels.
    assert!(agreeing >= 120, "q8_0 agrees with f32 on the first {agreeing} of {total} codes (measured 244)");
    // What the agreement cannot see (one near tie ends it, and a mildly wrong quantizer can keep
    // to it): on the same input, the logits must follow f32's closely.
    assert!(
        talker_r >= MIN_TALKER_R && predictor_r >= MIN_PREDICTOR_R,
        "q8_0 logits correlate with f32's by only {talker_r} (talker), {predictor_r} (code predictor)"
    );
    // The weights were quantized: some case parts from f32 (with f32 weights none could).
    assert!(differing_cases > 0, "q8_0 codes equal f32's everywhere: were the weights quantized?");
}

#[test]
fn q8_0_synthesis_through_the_registry_makes_audio() {
    let dir = fixture("qwen3-tts/small");
    let cfg = LoadConfig { quant: Some(DType::Q8_0), ..LoadConfig::default() };
    let tts = Registry::builtin().unwrap().load_speech_model(&dir, &cfg).unwrap();
    let mut samples = Vec::new();
    let m = tts
        .synthesize("Hello world.", &greedy(), &CancelToken::new(), &mut |c| {
            samples.extend_from_slice(&c.samples);
            true
        })
        .unwrap();
    assert!(m.frames > 0);
    assert_eq!(samples.len(), m.frames * 1920, "1920 samples a frame");
    assert!(samples.iter().all(|s| s.is_finite() && s.abs() <= 1.0));
}

#[test]
fn a_backend_without_the_kernels_refuses_to_quantize() {
    let candle = Registry::builtin().unwrap().backend(Some("candle"), None).unwrap();
    let plain = Backend::from_impl(NoBlockFormats(candle));
    let err = CodeGenerator::load(&fixture("qwen3-tts/small"), &plain, DType::F32, Some(DType::Q8_0))
        .err()
        .expect("loading with q8_0 on a backend without GGML kernels must fail");
    assert!(err.to_string().contains("cannot run q8_0 weights"), "{err}");
}

#[test]
fn unknown_quant_names_and_models_that_cannot_quantize_give_clear_errors() {
    let err = DType::parse_linear_quant("q9").unwrap_err().to_string();
    assert!(err.contains("unknown quantization `q9` (supported: q8_0, q4_k)"), "{err}");
    assert_eq!(DType::parse_linear_quant("Q8_0").unwrap(), DType::Q8_0);
    let cfg = LoadConfig { quant: Some(DType::Q8_0), ..LoadConfig::default() };
    let err = Registry::builtin().unwrap().load_model(&fixture("qwen3/gqa"), &cfg).err().expect("a text model refuses");
    assert!(err.to_string().contains("does not quantize weights at load"), "{err}");
}

/// The candle backend with its block formats hidden, as the tch and MLX backends report them.
struct NoBlockFormats(Backend);

impl BackendImpl for NoBlockFormats {
    fn name(&self) -> RStr<'_> {
        RStr::from_str("no-block-formats")
    }
    fn device(&self) -> DeviceInfo {
        self.0.device()
    }
    fn memory(&self) -> MemoryStats {
        self.0.memory()
    }
    fn supports_dtype(&self, dtype: DType) -> bool {
        !dtype.is_quantized() && self.0.supports_dtype(dtype)
    }
    fn from_bytes(&self, b: RSlice<'_, u8>, d: DType, s: RSlice<'_, usize>) -> RResult<TensorObj, FfiError> {
        self.0.obj().from_bytes(b, d, s)
    }
    fn full(&self, v: f64, d: DType, s: RSlice<'_, usize>) -> RResult<TensorObj, FfiError> {
        self.0.obj().full(v, d, s)
    }
    fn to_bytes(&self, t: &TensorObj) -> RResult<RVec<u8>, FfiError> {
        self.0.obj().to_bytes(t)
    }
    fn exec(&self, op: Op<'_>, inputs: RSlice<'_, &TensorObj>) -> RResult<TensorObj, FfiError> {
        self.0.obj().exec(op, inputs)
    }
    fn eval(&self, t: RSlice<'_, &TensorObj>) -> RResult<(), FfiError> {
        self.0.obj().eval(t)
    }
}
