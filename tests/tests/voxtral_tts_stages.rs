//! Voxtral-4B-TTS stage by stage against mlx-audio 0.6.2 on the tiny checkpoints it ran
//! (tools/fixtures/make_voxtral_tts.py), on every backend setup, all in f32 (the `bf16` checkpoint
//! stores BF16 weights; its goldens were computed in f32 from those rounded weights, as our loader
//! upcasts them):
//!
//! - prompt ids (sanitizer, Tekken, voice positions) identical to mistral-common's;
//! - backbone: every prefill position's final hidden state (interleaved RoPE, GQA, q dim != dim);
//! - acoustic head, fed the reference's hidden state and recorded noise for every frame decode:
//!   masked semantic logits, each Euler step's conditional/unconditional velocities, and the codes
//!   (argmax, CFG, clip + round-half-even FSQ) identical;
//! - the whole generation loop with the recorded noise: every code identical, END_AUDIO stop and
//!   frame cap included (the fixture picked noise seeds with no near-tie: semantic top-2 gaps
//!   >= 1e-3, FSQ values >= 1e-3 from a rounding boundary);
//! - codec: the dequantized latent, each stage's conv and transformer output, the waveform.
//!
//! Tolerances (absolute): both sides compute in f32 with different summation orders. Observed
//! (all setups): prefill hidden states 2.0e-6, velocities 8.6e-7, codec stages 6.0e-6 (values of
//! magnitude ~1-10); the bounds (5e-5, logits 1e-4) leave about 10x room. The tests print the gaps
//! (`--nocapture`).

use std::path::Path;

use infer_core::audio::{InjectedNoise, RSome, SpeechOptions};
use infer_core::{CancelToken, DType, LoadConfig, ModelLoadOptions, Tensor};
use infer_tests::{fixture, max_abs_diff, Setup};
use infer_voxtral_tts::VoxtralTts;
use serde::Deserialize;

const HIDDEN_TOL: f32 = 5e-5;
const LOGIT_TOL: f32 = 1e-4;
const VELOCITY_TOL: f32 = 5e-5;
const CODEC_TOL: f32 = 5e-5;

#[derive(Deserialize)]
struct Goldens {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    text: String,
    voice: String,
    prompt_ids: Vec<u32>,
    max_frames: usize,
    stopped: bool,
    decode_calls: usize,
    codes: Vec<Vec<u32>>,
}

pub struct Tensors {
    bytes: Vec<u8>,
}

impl Tensors {
    fn open(path: &Path) -> Self {
        Tensors { bytes: std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())) }
    }

    /// A tensor as (f32 values, shape); i32 tensors are converted.
    fn get(&self, name: &str) -> (Vec<f32>, Vec<usize>) {
        let st = safetensors::SafeTensors::deserialize(&self.bytes).unwrap();
        let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let data = t.data();
        let values = match t.dtype() {
            safetensors::Dtype::F32 => {
                data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
            }
            safetensors::Dtype::I32 => {
                data.chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32).collect()
            }
            d => panic!("{name}: dtype {d:?}"),
        };
        (values, t.shape().to_vec())
    }
}

fn goldens(dir: &Path) -> (Goldens, Tensors) {
    let g = serde_json::from_str(&std::fs::read_to_string(dir.join("goldens.json")).unwrap()).unwrap();
    (g, Tensors::open(&dir.join("goldens.safetensors")))
}

const FIXTURES: [&str; 2] = ["voxtral-tts/small", "voxtral-tts/bf16"];

fn load(dir: &Path, setup: Setup) -> VoxtralTts {
    let registry = setup.registry().unwrap();
    let backend = registry.backend(Some(setup.backend()), None).unwrap();
    VoxtralTts::load(dir, &backend, &ModelLoadOptions { dtype: DType::F32, context_len: 0, ..Default::default() })
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn noise(t: &Tensors, case: &str) -> InjectedNoise {
    let (values, shape) = t.get(&format!("{case}.noise"));
    InjectedNoise { values: values.into(), width: shape[1] }
}

#[test]
fn prompt_backbone_and_acoustic_head_match_mlx_audio_on_every_setup() {
    for setup in Setup::all() {
        for f in FIXTURES {
            let dir = fixture(f);
            let (g, t) = goldens(&dir);
            let tts = load(&dir, setup);
            let gen = tts.generator();
            for case in &g.cases {
                let what = format!("{f}/{} ({setup:?})", case.name);
                let ids = tts.prompt_ids(&case.text, &case.voice).unwrap();
                assert_eq!(ids, case.prompt_ids, "{what}: prompt ids");

                // Backbone over the whole prompt (the first case's goldens hold every position).
                let prefill_name = format!("{}.prefill_hidden", case.name);
                if safetensors::SafeTensors::deserialize(&t.bytes).unwrap().tensor(&prefill_name).is_ok() {
                    let (want, _) = t.get(&prefill_name);
                    let x = tts.prompt_embeddings(&ids, &case.voice).unwrap();
                    let h = tts.backbone.forward(&x, &mut tts.backbone.new_cache()).unwrap();
                    let d = max_abs_diff(&h.to_vec_f32().unwrap(), &want);
                    eprintln!("{what}: prefill hidden max |diff| {d:e}");
                    assert!(d < HIDDEN_TOL, "{what}: prefill hidden states differ by {d}");
                }

                // The acoustic head on the reference's hidden states, one frame decode at a time.
                let (hidden, hshape) = t.get(&format!("{}.hidden", case.name));
                let (logits, lshape) = t.get(&format!("{}.semantic_logits", case.name));
                let (velocity, _) = t.get(&format!("{}.velocity", case.name));
                let noise = noise(&t, &case.name);
                let dim = hshape[1];
                assert_eq!(hshape[0], case.decode_calls);
                let steps = 7;
                let per_call = steps * 2 * noise.width;
                let mut worst_velocity = 0f32;
                for j in 0..case.decode_calls {
                    let h = Tensor::from_f32(
                        gen.backbone.embed_tokens(&[0]).unwrap().backend(),
                        &hidden[j * dim..(j + 1) * dim],
                        &[1, 1, dim],
                    )
                    .unwrap();
                    let frame = gen.decode_frame(&h, noise.row(j).unwrap(), None).unwrap();
                    let rows = lshape[1];
                    let want = &logits[j * rows..(j + 1) * rows];
                    // Masked entries: -inf here, -1e9 + logit there.
                    for (i, (a, b)) in frame.semantic_logits.iter().zip(want).enumerate() {
                        if *b < -1e8 {
                            assert!(a.is_infinite() && *a < 0.0, "{what}: frame {j} logit {i} should be masked");
                        } else {
                            assert!((a - b).abs() < LOGIT_TOL, "{what}: frame {j} logit {i}: {a} vs {b}");
                        }
                    }
                    let want_codes: &[u32] =
                        if j < case.codes.len() { &case.codes[j] } else { &[infer_voxtral_tts::config::END_AUDIO] };
                    assert_eq!(frame.codes, want_codes, "{what}: frame {j} codes from the reference hidden state");
                    if j < case.codes.len() {
                        let ours: Vec<f32> = frame.velocities.concat();
                        let d = max_abs_diff(&ours, &velocity[j * per_call..(j + 1) * per_call]);
                        worst_velocity = worst_velocity.max(d);
                        assert!(d < VELOCITY_TOL, "{what}: frame {j} velocities differ by {d}");
                    }
                }

                eprintln!("{what}: velocities max |diff| {worst_velocity:e}");
                // The whole loop with the recorded noise.
                let options = SpeechOptions {
                    temperature: 0.0,
                    max_frames: case.max_frames,
                    injected_noise: RSome(noise.clone()),
                    ..SpeechOptions::default()
                };
                let x = tts.prompt_embeddings(&ids, &case.voice).unwrap();
                let out = gen.generate(&x, &options, &CancelToken::new(), &mut |_| true).unwrap();
                assert_eq!(out.frames, case.codes, "{what}: generated codes");
                assert_eq!(out.stopped, case.stopped, "{what}: END_AUDIO stop");
            }
        }
    }
}

#[test]
fn codec_matches_mlx_audio_stage_by_stage_on_every_setup() {
    for setup in Setup::all() {
        for f in FIXTURES {
            let dir = fixture(f);
            let (_, t) = goldens(&dir);
            let tts = load(&dir, setup);
            let (codes, shape) = t.get("codec.codes");
            let frames: Vec<Vec<u32>> = codes.chunks(shape[1]).map(|r| r.iter().map(|&c| c as u32).collect()).collect();
            let trace = tts.codec.decode_traced(&frames).unwrap();
            for (name, value) in trace {
                let (want, _) = t.get(&format!("codec.{name}"));
                let d = max_abs_diff(&value.to_vec_f32().unwrap(), &want);
                eprintln!("{f} ({setup:?}): codec {name} max |diff| {d:e}");
                assert!(d < CODEC_TOL, "{f} ({setup:?}): codec {name} differs by {d}");
            }
        }
    }
}

#[test]
fn library_setups_load_the_plugin_by_params_json() {
    // The registry finds the plugin from params.json alone (no config.json) on every setup.
    for setup in Setup::all() {
        let registry = setup.registry().unwrap();
        let cfg = LoadConfig { backend: Some(setup.backend().into()), ..LoadConfig::default() };
        let tts = registry.load_speech_model(&fixture("voxtral-tts/small"), &cfg).unwrap();
        assert_eq!(tts.voices(), ["casual_male", "neutral_female"], "{setup:?}");
        assert_eq!(tts.sample_rate(), 24000);
    }
}
