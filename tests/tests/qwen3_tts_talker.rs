//! Qwen3-TTS talker + code predictor parity: greedy codes identical to qwen-tts 0.1.1's on tiny
//! random checkpoints it wrote (tools/fixtures/make_qwen3_tts.py), for a 0.6B-shaped model
//! (identity projection into the code predictor) and a 1.7B-shaped one (`small_to_mtp_projection`),
//! across prompt modes: no voice, x-vector, in-context cloning, non-streaming text.
//!
//! Both sides run in f32 and the ids must match exactly, on every backend setup, with one
//! allowance: the sub-code heads choose among 2048 codes, and where the reference's top-2 gap in a
//! frame is below `NEAR_TIE` (1e-3; our logits drift from the reference's by up to ~1e-4 after a few
//! autoregressive frames of these random weights) either choice is right and the sequences may part
//! there. Frames before such a tie, and the tie frame's first code, must still match; cases
//! without one must match in full, EOS position included. The fixture records the gaps.

use infer_core::audio::{CodebookSampling, RSome, SpeechOptions};
use infer_core::{CancelToken, DType};
use infer_qwen3_tts::generator::{CodeGenerator, CodeRequest};
use infer_qwen3_tts::prompt::SpeakerPrompt;
use infer_tests::{fixture, Setup};
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
    text_ids: Vec<u32>,
    codes: Vec<Vec<u32>>,
    non_streaming: bool,
    subcode_margins: Vec<f32>,
    speaker: Option<String>,
    ref_text: Option<String>,
    ref_codes: Option<Vec<Vec<u32>>>,
}

fn greedy(max_frames: usize) -> SpeechOptions {
    SpeechOptions {
        temperature: 0.0,
        repeat_penalty: 1.05,
        codebook_sampling: RSome(CodebookSampling { temperature: 0.0, top_k: 0, top_p: 1.0 }),
        max_frames,
        ..SpeechOptions::default()
    }
}

fn check_model(case_dir: &str) {
    let dir = fixture(case_dir);
    let goldens: Goldens =
        serde_json::from_str(&std::fs::read_to_string(dir.join("goldens.json")).unwrap()).expect("goldens.json");
    for setup in Setup::all() {
        let registry = setup.registry().unwrap();
        let backend = registry.backend(Some(setup.backend()), None).unwrap();
        let generator = CodeGenerator::load(&dir, &backend, DType::F32, None).unwrap();
        for case in &goldens.cases {
            let ids = generator.text_ids(&case.text).unwrap();
            assert_eq!(ids, case.text_ids, "{case_dir}/{}: tokenization", case.name);
            let speaker = match case.speaker.as_deref() {
                None => SpeakerPrompt::None,
                Some("wav") => SpeakerPrompt::XVector(goldens.wav_speaker.clone()),
                Some(_) => SpeakerPrompt::XVector(goldens.random_speaker.clone()),
            };
            let req = CodeRequest {
                text: &case.text,
                language: Some(&case.language),
                speaker,
                in_context: case.ref_text.as_deref().map(|t| (t, case.ref_codes.clone().unwrap())),
                non_streaming: case.non_streaming,
            };
            let mut seen = 0;
            let codes = generator
                .generate(&req, &greedy(23), &CancelToken::new(), &mut |_| {
                    seen += 1;
                    true
                })
                .unwrap_or_else(|e| panic!("{case_dir}/{}: {e}", case.name));
            assert_eq!(seen, codes.len());
            let what = format!("{case_dir}/{} ({setup:?}): greedy codes", case.name);
            assert_codes_match(&codes, &case.codes, &case.subcode_margins, &what);
        }
    }
}

const NEAR_TIE: f32 = 1e-3;

/// Exact equality up to the first frame whose reference sub-codes were a near tie.
fn assert_codes_match(ours: &[Vec<u32>], reference: &[Vec<u32>], margins: &[f32], what: &str) {
    match margins.iter().position(|&m| m < NEAR_TIE) {
        None => assert_eq!(ours, reference, "{what}"),
        Some(tie) => {
            assert!(ours.len() > tie, "{what}: ended at {} frames, before the near tie at frame {tie}", ours.len());
            assert_eq!(ours[..tie], reference[..tie], "{what}: frames before the near tie at {tie}");
            assert_eq!(ours[tie][0], reference[tie][0], "{what}: first code of the near-tie frame {tie}");
        }
    }
}

#[test]
fn small_model_matches_qwen_tts_greedy_codes() {
    check_model("qwen3-tts/small");
}

#[test]
fn mtp_projection_model_matches_qwen_tts_greedy_codes() {
    check_model("qwen3-tts/mtp");
}
